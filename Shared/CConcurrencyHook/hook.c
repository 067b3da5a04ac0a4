#include "CConcurrencyHook.h"

extern void *swift_task_enqueueGlobal_hook;

void **cch_enqueue_global_hook_address(void) {
    return &swift_task_enqueueGlobal_hook;
}
