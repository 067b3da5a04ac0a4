import Synchronization

package struct TimeoutError: Error, CustomStringConvertible {
    package var what: String
    package var limit: Duration
    package var description: String { "\(what) timed out after \(limit)" }
}

/// Runs `work`, giving up after `limit`. On time-out `work` is cancelled but not waited for: work
/// that ignores cancellation (a query on a connection whose server went away can) finishes on its
/// own later, and cannot hold the caller past the limit.
package func withTimeout<T: Sendable>(_ limit: Duration, what: String = "operation", _ work: @escaping @Sendable () async throws -> T) async throws -> T {
    let race = TimeoutRace<T>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { continuation in
            race.start(continuation, limit: limit, timeout: TimeoutError(what: what, limit: limit), work: work)
        }
    } onCancel: {
        race.finish(.failure(CancellationError()))
    }
}

/// The state `withTimeout` shares between the work, its timer and the caller's cancellation: whoever
/// comes first resumes the caller and cancels the others.
private final class TimeoutRace<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var tasks: [Task<Void, Never>] = []
        var early: Result<T, any Error>?
    }
    private let state = Mutex(State())

    func start(_ continuation: CheckedContinuation<T, any Error>, limit: Duration, timeout: TimeoutError, work: @escaping @Sendable () async throws -> T) {
        let worker = Task {
            do { self.finish(.success(try await work())) } catch { self.finish(.failure(error)) }
        }
        let timer = Task {
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            self.finish(.failure(timeout))
        }
        let early = state.withLock { state -> Result<T, any Error>? in
            state.tasks = [worker, timer]
            if let early = state.early { return early }
            state.continuation = continuation
            return nil
        }
        if let early {
            worker.cancel()
            timer.cancel()
            continuation.resume(with: early)
        }
    }

    func finish(_ result: Result<T, any Error>) {
        let (continuation, tasks) = state.withLock { state -> (CheckedContinuation<T, any Error>?, [Task<Void, Never>]) in
            if state.continuation == nil && state.early == nil && state.tasks.isEmpty { state.early = result }
            defer { state.continuation = nil }
            return (state.continuation, state.tasks)
        }
        guard let continuation else { return }
        for task in tasks { task.cancel() }
        continuation.resume(with: result)
    }
}
