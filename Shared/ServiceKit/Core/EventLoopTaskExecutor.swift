import NIOCore
import Synchronization

/// Runs Swift tasks that prefer it on one NIO event loop. One per loop, made on first use.
package final class EventLoopTaskExecutor: TaskExecutor {
    let loop: any EventLoop

    private init(loop: any EventLoop) { self.loop = loop }

    private static let executors = Mutex<[ObjectIdentifier: EventLoopTaskExecutor]>([:])

    package static func `for`(_ loop: any EventLoop) -> EventLoopTaskExecutor {
        executors.withLock { executors in
            if let executor = executors[ObjectIdentifier(loop)] { return executor }
            let executor = EventLoopTaskExecutor(loop: loop)
            executors[ObjectIdentifier(loop)] = executor
            return executor
        }
    }

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}
