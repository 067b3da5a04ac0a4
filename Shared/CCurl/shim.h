#ifndef CCURL_SHIM_H
#define CCURL_SHIM_H
#include <curl/curl.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

// libcurl is loaded on first use (dlopen), not at process start: it and the libraries it pulls in
// (OpenSSL, LDAP, SSH, ...) cost several MiB of resident memory that a service which has not sent
// mail yet should not pay. The header still gives the types and constants; every call goes through
// the function pointers below.
typedef struct {
    CURLcode (*global_init)(long);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_perform)(CURL *);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
    const char *(*easy_strerror)(CURLcode);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
    int loaded;
} ccurl_api_t;

// State lives in function-local statics: Swift emits the inline functions of an imported header,
// not its file-scope variables.
static inline ccurl_api_t *ccurl_state(void) {
    static ccurl_api_t api;
    return &api;
}
#define ccurl_api (*ccurl_state())

static inline void ccurl_load(void) {
    void *lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcurl.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    ccurl_api.global_init = (CURLcode (*)(long))dlsym(lib, "curl_global_init");
    ccurl_api.easy_init = (CURL *(*)(void))dlsym(lib, "curl_easy_init");
    ccurl_api.easy_cleanup = (void (*)(CURL *))dlsym(lib, "curl_easy_cleanup");
    ccurl_api.easy_setopt = (CURLcode (*)(CURL *, CURLoption, ...))dlsym(lib, "curl_easy_setopt");
    ccurl_api.easy_perform = (CURLcode (*)(CURL *))dlsym(lib, "curl_easy_perform");
    ccurl_api.easy_getinfo = (CURLcode (*)(CURL *, CURLINFO, ...))dlsym(lib, "curl_easy_getinfo");
    ccurl_api.easy_strerror = (const char *(*)(CURLcode))dlsym(lib, "curl_easy_strerror");
    ccurl_api.slist_append = (struct curl_slist *(*)(struct curl_slist *, const char *))dlsym(lib, "curl_slist_append");
    ccurl_api.slist_free_all = (void (*)(struct curl_slist *))dlsym(lib, "curl_slist_free_all");
    if (ccurl_api.global_init && ccurl_api.easy_init && ccurl_api.easy_cleanup && ccurl_api.easy_setopt && ccurl_api.easy_perform
        && ccurl_api.easy_getinfo && ccurl_api.easy_strerror && ccurl_api.slist_append && ccurl_api.slist_free_all) {
        ccurl_api.global_init(CURL_GLOBAL_DEFAULT);
        ccurl_api.loaded = 1;
    }
}

/// Loads libcurl once (thread-safe); 0 when it is not installed.
static inline int ccurl_available(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, ccurl_load);
    return ccurl_api.loaded;
}

static inline CURL *ccurl_easy_init(void) { return ccurl_available() ? ccurl_api.easy_init() : NULL; }
static inline void ccurl_easy_cleanup(CURL *handle) { ccurl_api.easy_cleanup(handle); }
static inline CURLcode ccurl_easy_perform(CURL *handle) { return ccurl_api.easy_perform(handle); }
static inline const char *ccurl_easy_strerror(CURLcode code) { return ccurl_api.easy_strerror(code); }
static inline struct curl_slist *ccurl_slist_append(struct curl_slist *list, const char *value) { return ccurl_api.slist_append(list, value); }
static inline void ccurl_slist_free_all(struct curl_slist *list) { ccurl_api.slist_free_all(list); }

// curl_easy_setopt is variadic, which Swift cannot call: one typed wrapper per argument kind.
static inline CURLcode ccurl_set_long(CURL *handle, CURLoption option, long value) {
    return ccurl_api.easy_setopt(handle, option, value);
}
static inline CURLcode ccurl_set_string(CURL *handle, CURLoption option, const char *value) {
    return ccurl_api.easy_setopt(handle, option, value);
}
static inline CURLcode ccurl_set_pointer(CURL *handle, CURLoption option, void *value) {
    return ccurl_api.easy_setopt(handle, option, value);
}
typedef size_t (*ccurl_read_callback)(char *buffer, size_t size, size_t count, void *context);
static inline CURLcode ccurl_set_read_callback(CURL *handle, ccurl_read_callback callback) {
    return ccurl_api.easy_setopt(handle, CURLOPT_READFUNCTION, callback);
}
static inline CURLcode ccurl_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return ccurl_api.easy_getinfo(handle, info, value);
}
#endif
