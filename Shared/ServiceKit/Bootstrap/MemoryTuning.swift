import CConcurrencyHook
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
    /// Limits malloc arenas, makes `ServiceLogHandler` the log handler, and runs Swift Concurrency's
    /// tasks on the event-loop threads instead of a pool of their own: a request then no longer hops
    /// between the two for every await on the network or the database (those hops were a tenth of a
    /// profile read's CPU). Blocking work (bcrypt, libcurl) already runs on `NIOThreadPool`, never on
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
        if ProcessInfo.processInfo.environment["NIO_GLOBAL_EXECUTOR"] != "0", !runTasksOnEventLoops() {
            FileHandle.standardError.write(Data("warning: Swift tasks keep their own thread pool (the global executor hook could not be installed)\n".utf8))
        }
    }

    /// `EVENT_LOOP_THREADS`: how many event-loop threads the process runs (NIO's default, one per core,
    /// when unset). A process with its own cores wants one per core. Where the whole stack shares a few
    /// cores (`scripts/stack`, docker compose) one each is faster: a request no longer wakes a second
    /// thread of the same process, and the gateway's p99 on two cores halved (README, figures).
    /// Read here, before anything starts a loop; the service's configuration reports a malformed value.
    public static let eventLoopThreadsRange = 1...64

    public static func eventLoopThreads(in environment: [String: String]) -> Int? {
        guard let text = environment["EVENT_LOOP_THREADS"], let threads = Int(text.trimmingCharacters(in: .whitespaces)),
              eventLoopThreadsRange.contains(threads) else { return nil }
        return threads
    }

    /// Checks `EVENT_LOOP_THREADS` with the rest of the configuration, so a malformed value stops the
    /// process with the other problems (`apply()` has left NIO's default in place for it).
    public static func readEventLoopThreads(_ env: inout EnvironmentReader) {
        _ = env.int("EVENT_LOOP_THREADS", default: NIOCore.System.coreCount, range: eventLoopThreadsRange)
    }

    private typealias EnqueueGlobalHook = @convention(thin) (UnownedJob, @convention(thin) (UnownedJob) -> Void) -> Void

    /// What `NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()`
    /// does, with the hook's address taken from the linker instead of `dlsym`, which cannot see it in
    /// a `--static-swift-stdlib` build (the release build here and in the Dockerfile). Every job
    /// the runtime would give the global pool goes to an event loop of NIO's singleton group: the
    /// current one when the job is enqueued from a loop, so an awaited reply resumes on its own thread.
    private static func runTasksOnEventLoops() -> Bool {
        // As NIO does: the hook's type is the runtime's private business, checked up to this compiler.
        #if compiler(>=6.6)
        return false
        #else
        let hook: EnqueueGlobalHook = { job, _ in
            // Run as the global executor runs its jobs (on the generic executor), not as NIO's own
            // hook does (on the loop's serial executor, from which each call into a nonisolated async
            // function is a switch the runtime makes by enqueueing again: some 70 per profile read).
            MultiThreadedEventLoopGroup.singleton.any().execute {
                cch_run_job_on_generic_executor(unsafeBitCast(job, to: UnsafeMutableRawPointer.self))
            }
        }
        return withUnsafeTemporaryAllocation(of: EnqueueGlobalHook.self, capacity: 1) { storage in
            storage.baseAddress!.initialize(to: hook)
            return storage.baseAddress!.withMemoryRebound(to: UnsafeRawPointer.self, capacity: 1) { function in
                let slot = UnsafeMutableRawPointer(cch_enqueue_global_hook_address())
                    .bindMemory(to: UnsafeRawPointer?.self, capacity: 1)
                // Installed once, from the main thread, before any other thread starts.
                guard slot.pointee == nil else { return false }
                slot.pointee = function.pointee
                return true
            }
        }
        #endif
    }
}
