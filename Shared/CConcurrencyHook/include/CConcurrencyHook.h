#pragma once

/// The address of the Swift runtime's `swift_task_enqueueGlobal_hook` variable. SwiftNIO finds it
/// with `dlsym`, which fails in a binary built with `--static-swift-stdlib` (the static standard
/// library is linked with `--exclude-libs ALL`, so the symbol is not exported); a reference the
/// linker resolves finds it in static and dynamic builds alike.
void *_Nullable *_Nonnull cch_enqueue_global_hook_address(void);
