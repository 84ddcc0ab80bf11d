# Finds Debian's libgloo-dev and defines Gloo::gloo.
find_path(GLOO_INCLUDE_DIR gloo/allreduce.h)
find_library(GLOO_LIBRARY NAMES gloo)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(Gloo REQUIRED_VARS GLOO_LIBRARY GLOO_INCLUDE_DIR)
if(Gloo_FOUND AND NOT TARGET Gloo::gloo)
  add_library(Gloo::gloo UNKNOWN IMPORTED)
  set_target_properties(Gloo::gloo PROPERTIES IMPORTED_LOCATION ${GLOO_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${GLOO_INCLUDE_DIR})
endif()
