import CGlibcExtras
import Foundation
import NIOCore
import NIOPosix
import ServiceKitCore
import ServiceKitHTTP
import ServiceKitRedis
/// glibc malloc settings for small, long-lived services. By default glibc gives every thread that
/// allocates an arena of its own (up to 8 per core), and keeps memory freed after start-up mapped;
/// on a process that idles most of the time both show up as resident memory doing nothing.
public enum MemoryTuning {
    /// Two arenas are plenty for 2 event-loop threads plus the cooperative pool. Must run before
    /// other threads start allocating; `MALLOC_ARENA_MAX` in the environment wins.
    package static func limitArenas(_ count: Int32 = 2) {
        if getenv("MALLOC_ARENA_MAX") == nil { _ = cge_limit_malloc_arenas(count) }
    }

    /// Hands memory freed after start-up (migration SQL, configuration parsing) back to the system.
    public static func releaseFreeMemory() {
        _ = cge_release_free_memory()
    }
}

/// What every executable does first, before any other thread or task starts.
public enum ProcessTuning {
    /// Limits malloc arenas, makes `ServiceLogHandler` the log handler, and asks SwiftNIO to run Swift
    /// Concurrency's tasks on the event-loop threads instead of a pool of their own, so a request does
    /// not hop between the two for every await on the network or the database. That uses NIO's public
    /// installer, which finds the runtime's hook with `dlsym`: it works where the Swift runtime is a
    /// shared library (debug builds, the tests) and not in a `--static-swift-stdlib` build that exports
    /// no symbols (the release build), where tasks keep the runtime's own pool. `NIO_GLOBAL_EXECUTOR=0`
    /// keeps them there everywhere (docs/CONFIGURATION.md). Blocking work (bcrypt, libcurl) runs on `NIOThreadPool`, never on
    /// the executor.
    public static func apply() {
        MemoryTuning.limitArenas()
        if let threads = eventLoopThreads(in: ProcessInfo.processInfo.environment) {
            NIOSingletons.groupLoopCountSuggestion = threads
        }
        // The loops' threads start now, from the main thread, and so run at the nice value the process
        // was started at (scripts/stack gives the services a higher priority than the database). Made
        // later from a libdispatch worker, they took that worker's nice, which dispatch sets from its QoS.
        _ = MultiThreadedEventLoopGroup.singleton
        ServiceLogHandler.bootstrap()
        if ProcessInfo.processInfo.environment["NIO_GLOBAL_EXECUTOR"] != "0" {
            tasksRunOnEventLoops = NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        }
    }

    /// Whether `apply()` made the event loops Swift Concurrency's global executor (logged at start).
    package nonisolated(unsafe) private(set) static var tasksRunOnEventLoops = false

    /// `EVENT_LOOP_THREADS`: how many event-loop threads the process runs (NIO's default, one per core,
    /// when unset). A process with its own cores wants one per core. Where the whole stack shares a few
    /// cores (`scripts/stack`, docker compose) one each is faster: a request no longer wakes a second
    /// thread of the same process, and the gateway's p99 on two cores halved (docs/BENCHMARKS.md).
    /// Read here, before anything starts a loop; the service's configuration reports a malformed value.
    package static let eventLoopThreadsRange = 1...64

    package static func eventLoopThreads(in environment: [String: String]) -> Int? {
        guard let text = environment["EVENT_LOOP_THREADS"], let threads = Int(text.trimmingCharacters(in: .whitespaces)),
            eventLoopThreadsRange.contains(threads)
        else { return nil }
        return threads
    }

    /// Checks `EVENT_LOOP_THREADS` with the rest of the configuration, so a malformed value stops the
    /// process with the other problems (`apply()` has left NIO's default in place for it).
    public static func readEventLoopThreads(_ env: inout EnvironmentReader) {
        _ = env.int("EVENT_LOOP_THREADS", default: NIOCore.System.coreCount, range: eventLoopThreadsRange)
    }
}
