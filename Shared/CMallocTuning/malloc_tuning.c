#include "CMallocTuning.h"

#if defined(__GLIBC__)
#include <malloc.h>

int cmt_limit_arenas(int count) { return mallopt(M_ARENA_MAX, count); }
int cmt_release_free_memory(void) { return malloc_trim(0); }
#else
int cmt_limit_arenas(int count) { (void)count; return 0; }
int cmt_release_free_memory(void) { return 0; }
#endif
