#include <stdint.h>
#include "CConcurrencyHook.h"

extern void *swift_task_enqueueGlobal_hook;

void **cch_enqueue_global_hook_address(void) {
    return &swift_task_enqueueGlobal_hook;
}

/// The runtime's `SerialExecutorRef`: a null identity is the generic executor.
typedef struct {
    void *identity;
    uintptr_t implementation;
} cch_serial_executor_ref;

/// From the Swift runtime (include/swift/Runtime/Concurrency.h), Swift calling convention.
extern void swift_job_run(void *job, cch_serial_executor_ref executor) __attribute__((swiftcall));

void cch_run_job_on_generic_executor(void *job) {
    cch_serial_executor_ref generic = { 0, 0 };
    swift_job_run(job, generic);
}
