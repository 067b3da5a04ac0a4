#ifndef C_MALLOC_TUNING_H
#define C_MALLOC_TUNING_H

/// glibc's malloc tuning, through its documented C API (malloc.h), which Swift's Glibc module does
/// not include. Each returns what the glibc call returns; elsewhere they do nothing and return 0.
int cmt_limit_arenas(int count);
int cmt_release_free_memory(void);

#endif
