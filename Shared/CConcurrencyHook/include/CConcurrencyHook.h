#pragma once

/// The address of the Swift runtime's `swift_task_enqueueGlobal_hook` variable. SwiftNIO finds it
/// with `dlsym`, which fails in a binary built with `--static-swift-stdlib` (the static standard
/// library is linked with `--exclude-libs ALL`, so the symbol is not exported); a reference the
/// linker resolves finds it in static and dynamic builds alike.
void *_Nullable *_Nonnull cch_enqueue_global_hook_address(void);

/// Runs a job taken from the global queue on this thread as the global executor does: on the
/// generic executor. (`UnownedJob.runSynchronously(on:)` needs a serial executor, and a job run on
/// an event loop's serial executor makes every later call into a nonisolated async function a
/// switch, which the runtime can then only make by enqueueing the task again.)
void cch_run_job_on_generic_executor(void *_Nonnull job);
