import NIOCore
import NIOPosix
import PostgresNIO
import ServiceKitCore
import Synchronization

/// How long a request may wait for each pooled connection, set by the HTTP layer for the request's
/// task (`DatabaseGateMiddleware`). PostgresNIO's pool queues a lease while it retries connections
/// to a PostgreSQL that went away, for as long as the outage lasts: a request that arrived just
/// before the watch noticed would wait with it. With a budget, the wait ends at the deadline, or as
/// soon as the watch says the database is out of reach, with `DatabaseWaitExceeded` (a 503). Work
/// without a budget (the outbox relay, event consumers) waits as before: it retries anyway.
///
/// The statements themselves are bounded by PostgreSQL's `statement_timeout`, and a statement on a
/// connection the server ends fails at once, so the budget covers the one wait nothing else bounds.
package struct DatabaseBudget: Sendable {
    /// The longest wait for one lease, counted from when it is asked for: a request that spent its
    /// first seconds elsewhere (a slow upload, a password hash) still gets the whole wait.
    package var maxWait: Duration
    package var watch: DatabaseWatch?

    package init(maxWait: Duration, watch: DatabaseWatch?) {
        self.maxWait = maxWait
        self.watch = watch
    }

    @TaskLocal package static var current: DatabaseBudget?
}

/// No pooled connection came within the request's `DatabaseBudget`: PostgreSQL is out of reach, or
/// every connection is busy for longer than a request may wait.
package struct DatabaseWaitExceeded: Error, CustomStringConvertible {
    package var unreachable: Bool
    package var description: String {
        unreachable ? "the database is out of reach" : "no database connection came free within the request's time"
    }
}

extension PostgresClient {
    /// `withConnection` with the lease wait bounded by `budget`. The lease is taken in a task of its
    /// own that hands the connection to this task and holds the lease until `body` is done; a timer
    /// on an event loop ends the wait at the deadline, or when the watch reports the database
    /// unreachable.
    func withConnection<Result: Sendable>(within budget: DatabaseBudget, _ body: (PostgresConnection) async throws -> sending Result) async throws -> Result {
        let handoff = LeaseHandoff()
        let deadline = NIODeadline.now() + TimeAmount(budget.maxWait)
        let watch = budget.watch
        // Checked every 50 ms while the lease is awaited; cancelled as soon as it comes.
        let timer = PostgresClient.defaultEventLoopGroup.any().scheduleRepeatedTask(initialDelay: .milliseconds(50), delay: .milliseconds(50)) { task in
            if let watch, !watch.isReachable {
                handoff.fail(DatabaseWaitExceeded(unreachable: true))
                task.cancel()
            } else if NIODeadline.now() >= deadline {
                handoff.fail(DatabaseWaitExceeded(unreachable: false))
                task.cancel()
            }
        }
        // Unstructured, and never cancelled: a lease the wait gave up on stays queued in the pool and
        // goes straight back when it comes, rather than being withdrawn while the pool is busy
        // replacing connections PostgreSQL ended (a path of its state machine best left alone).
        // On this thread's event loop: an unstructured task inherits no executor preference, and on
        // the global executor every lease and release woke a thread of its own and hopped back.
        let loop = MultiThreadedEventLoopGroup.currentEventLoop ?? PostgresClient.defaultEventLoopGroup.any()
        // A wait that ended while the lease stood at the gate asks the pool for nothing.
        Task(executorPreference: EventLoopTaskExecutor.for(loop)) {
            do {
                let pass = try await LeaseGate.of(self).enter()
                defer { pass.leave() }
                guard !handoff.isSettled else { return }
                try await self.withConnection { connection in
                    pass.leave()
                    await handoff.hold(connection)
                }
            } catch {
                handoff.fail(error)
            }
        }
        let connection: PostgresConnection
        do {
            connection = try await handoff.connection()
        } catch {
            timer.cancel()
            throw error
        }
        timer.cancel()
        defer { handoff.release() }
        return try await body(connection)
    }
}

/// The connection leased in one task and used in another, and the signal that gives it back.
private final class LeaseHandoff: Sendable {
    private enum State {
        case waiting
        case waiter(CheckedContinuation<PostgresConnection, any Error>)
        case leased(PostgresConnection)
        case failed(any Error)
        case handedOver
    }

    private struct Release {
        var released = false
        var holder: CheckedContinuation<Void, Never>?
    }

    private let state = Mutex<State>(.waiting)
    private let releaseState = Mutex(Release())

    var isSettled: Bool {
        state.withLock { state in
            switch state {
            case .waiting, .waiter: false
            case .leased, .failed, .handedOver: true
            }
        }
    }

    /// In the leasing task, inside `withConnection`: hands the connection over and waits for its
    /// release, or returns at once (giving it back to the pool) if the wait has already ended.
    func hold(_ connection: PostgresConnection) async {
        let (taken, waiter) = state.withLock { state -> (Bool, CheckedContinuation<PostgresConnection, any Error>?) in
            switch state {
            case .waiting:
                state = .leased(connection)
                return (true, nil)
            case .waiter(let continuation):
                state = .handedOver
                return (true, continuation)
            case .leased, .failed, .handedOver:
                return (false, nil)
            }
        }
        guard taken else { return }
        waiter?.resume(returning: connection)
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let resumeNow = releaseState.withLock { release in
                if release.released { return true }
                release.holder = continuation
                return false
            }
            if resumeNow { continuation.resume() }
        }
    }

    /// Ends the wait with `error`, unless the connection already came.
    func fail(_ error: any Error) {
        let waiter = state.withLock { state -> CheckedContinuation<PostgresConnection, any Error>? in
            switch state {
            case .waiting:
                state = .failed(error)
                return nil
            case .waiter(let continuation):
                state = .failed(error)
                return continuation
            case .leased, .failed, .handedOver:
                return nil
            }
        }
        waiter?.resume(throwing: error)
    }

    /// In the using task: the connection, once leased, or the reason the wait ended.
    func connection() async throws -> PostgresConnection {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<PostgresConnection, any Error>) in
                let now = state.withLock { state -> Result<PostgresConnection, any Error>? in
                    switch state {
                    case .waiting:
                        state = .waiter(continuation)
                        return nil
                    case .leased(let connection):
                        state = .handedOver
                        return .success(connection)
                    case .failed(let error):
                        return .failure(error)
                    case .waiter, .handedOver:
                        return .failure(CancellationError())
                    }
                }
                if let now { continuation.resume(with: now) }
            }
        } onCancel: {
            fail(CancellationError())
        }
    }

    /// Gives the connection back: the leasing task leaves `withConnection`.
    func release() {
        let holder = releaseState.withLock { release -> CheckedContinuation<Void, Never>? in
            release.released = true
            defer { release.holder = nil }
            return release.holder
        }
        holder?.resume()
    }
}
