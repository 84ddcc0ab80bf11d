/* An empty program linked, without --as-needed, against one library: its NEEDED entries are
 * then every shared library that library's link closure names (test_no_curl). */
int main(void) { return 0; }
