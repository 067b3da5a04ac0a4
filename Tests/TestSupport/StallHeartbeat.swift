import Foundation
import NIOCore
import NIOPosix

/// A diagnostic for test timeouts that look like the test process stopped (the 5-20 s ones were
/// sockets held open by child processes, not stalls: `ChildProcess`). With `TEST_STALL_LOG=PATH` set, three
/// heartbeats tick every 100 ms in the test process: a plain thread, a task on the cooperative pool
/// and a repeated task on each loop of NIO's singleton group. Whenever one wakes more than a second
/// late it appends a line to PATH, which tells a stall apart by what stopped with it: only a loop (a
/// job that blocks its loop), only the pool (tasks that block the cooperative threads), or the thread
/// as well (the whole process, or the machine, did not run). Unset, it does nothing.
public enum StallHeartbeat {
    static let period: Int64 = 100_000_000  // ns
    static let reportAbove: Int64 = 1_000_000_000  // ns late

    /// One clock for the three heartbeats: monotonic nanoseconds.
    static func now() -> Int64 { Int64(DispatchTime.now().uptimeNanoseconds) }

    /// Touch it to start the heartbeats (once per process).
    public static let started: Void = {
        guard let path = ProcessInfo.processInfo.environment["TEST_STALL_LOG"], let file = fopen(path, "a") else { return }
        let log = Log(file: file)
        log.write("heartbeats started in pid \(getpid())")

        let thread = Thread {
            var last = now()
            while true {
                usleep(UInt32(period / 1000))
                last = log.tick("thread", since: last)
            }
        }
        thread.name = "stall-heartbeat"
        thread.start()

        Task.detached {
            var last = now()
            while true {
                try? await Task.sleep(nanoseconds: UInt64(period))
                last = log.tick("cooperative pool", since: last)
            }
        }

        for (index, loop) in MultiThreadedEventLoopGroup.singleton.makeIterator().enumerated() {
            loop.execute {
                let last = NIOLoopBoundBox(now(), eventLoop: loop)
                loop.scheduleRepeatedTask(initialDelay: .nanoseconds(period), delay: .nanoseconds(period)) { _ in
                    last.value = log.tick("loop \(index)", since: last.value)
                }
            }
        }
    }()

    final class Log: @unchecked Sendable {
        // stdio's FILE locks itself, so lines from several threads do not mix.
        let file: UnsafeMutablePointer<FILE>

        init(file: UnsafeMutablePointer<FILE>) { self.file = file }

        /// One heartbeat of `who`, the previous one at `last`: reports it if late, returns the time now.
        func tick(_ who: String, since last: Int64) -> Int64 {
            let now = StallHeartbeat.now()
            let late = now - last - StallHeartbeat.period
            if late > StallHeartbeat.reportAbove { write("\(who) woke \(Double(late / 1_000_000) / 1000) s late") }
            return now
        }

        func write(_ line: String) {
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            var parts = tm()
            var seconds = now.tv_sec
            gmtime_r(&seconds, &parts)
            let stamp = String(format: "%02d:%02d:%02d.%03d", parts.tm_hour, parts.tm_min, parts.tm_sec, now.tv_nsec / 1_000_000)
            fputs("\(stamp) \(line)\n", file)
            fflush(file)
        }
    }
}
