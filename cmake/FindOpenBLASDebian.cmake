# Finds Debian's OpenBLAS (libopenblas-dev) and defines OpenBLAS::OpenBLAS with cblas.h.
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-pthread /usr/include/openblas /usr/include/x86_64-linux-gnu NO_DEFAULT_PATH)
find_library(OPENBLAS_LIBRARY NAMES openblas PATHS /usr/lib/x86_64-linux-gnu/openblas-pthread /usr/lib/x86_64-linux-gnu)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(OpenBLASDebian REQUIRED_VARS OPENBLAS_LIBRARY OPENBLAS_INCLUDE_DIR)
if(OpenBLASDebian_FOUND AND NOT TARGET OpenBLAS::OpenBLAS)
  add_library(OpenBLAS::OpenBLAS UNKNOWN IMPORTED)
  set_target_properties(OpenBLAS::OpenBLAS PROPERTIES IMPORTED_LOCATION ${OPENBLAS_LIBRARY}
    INTERFACE_INCLUDE_DIRECTORIES ${OPENBLAS_INCLUDE_DIR})
endif()
