import Foundation
import NIOCore
import NIOPosix
/// glibc malloc settings for small, long-lived services. By default glibc gives every thread that
/// allocates an arena of its own (up to 8 per core), and keeps memory freed after start-up mapped;
/// on a process that idles most of the time both show up as resident memory doing nothing.
public enum MemoryTuning {
    /// Two arenas are plenty for 2 event-loop threads plus the cooperative pool. Must run before
    /// other threads start allocating; `MALLOC_ARENA_MAX` in the environment wins.
    public static func limitArenas(_ count: Int32 = 2) {
        #if os(Linux)
        if getenv("MALLOC_ARENA_MAX") == nil { _ = glibcMallopt(-8 /* M_ARENA_MAX */, count) }
        #endif
    }

    /// Hands memory freed after start-up (migration SQL, configuration parsing) back to the system.
    public static func releaseFreeMemory() {
        #if os(Linux)
        _ = glibcMallocTrim(0)
        #endif
    }
}

#if os(Linux)
import Glibc

@_silgen_name("mallopt")
private func glibcMallopt(_ parameter: Int32, _ value: Int32) -> Int32

@_silgen_name("malloc_trim")
private func glibcMallocTrim(_ pad: Int) -> Int32
#endif

/// What every executable does first, before any other thread or task starts.
public enum ProcessTuning {
    /// Limits malloc arenas, and runs Swift Concurrency's tasks on the event-loop threads instead of a
    /// pool of their own: a request then no longer hops between the two for every await on the
    /// network or the database (those hops were a tenth of a profile read's CPU). Blocking work
    /// (bcrypt, libcurl) already runs on `NIOThreadPool`, never on the executor.
    public static func apply() {
        MemoryTuning.limitArenas()
        if ProcessInfo.processInfo.environment["NIO_GLOBAL_EXECUTOR"] != "0" {
            _ = NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        }
    }
}
