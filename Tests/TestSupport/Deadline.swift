import Synchronization

/// Work that did not finish by its deadline.
public struct DeadlineExceeded: Error, CustomStringConvertible {
    public var what: String
    public var limit: Duration
    public var description: String { "\(what) did not finish within \(limit)" }
}

/// Runs `work` and returns its result, or throws `DeadlineExceeded` once `limit` has passed. Unlike a
/// task group racing a sleep, this returns at the deadline even when `work` ignores cancellation (it
/// is cancelled and left to end on its own), so one stuck dependency fails a test instead of hanging
/// the suite.
public func withDeadline<T: Sendable>(_ limit: Duration, _ what: String, _ work: @escaping @Sendable () async throws -> T) async throws -> T {
    let outcome = Mutex<CheckedContinuation<T, any Error>?>(nil)
    let finish: @Sendable (Result<T, any Error>) -> Bool = { result in
        guard
            let continuation = outcome.withLock({ state in
                defer { state = nil }; return state
            })
        else { return false }
        continuation.resume(with: result)
        return true
    }
    // The timer is stopped when the work ends first: a poll checking every few milliseconds would
    // otherwise leave a sleeping task behind for each check.
    let timer = DeadlineTimer()
    return try await withCheckedThrowingContinuation { continuation in
        outcome.withLock { $0 = continuation }
        let worker = Task {
            let ended: Bool
            do { ended = finish(.success(try await work())) } catch { ended = finish(.failure(error)) }
            if ended { timer.task.withLock { $0?.cancel() } }
        }
        let sleeper = Task {
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            if finish(.failure(DeadlineExceeded(what: what, limit: limit))) { worker.cancel() }
        }
        timer.task.withLock { $0 = sleeper }
        // Work that ended before the sleeper was stored found nothing to stop.
        if outcome.withLock({ $0 == nil }) { sleeper.cancel() }
    }
}

/// The task that ends `withDeadline`'s wait at the deadline, kept to be stopped when the work ends first.
private final class DeadlineTimer: Sendable {
    let task = Mutex<Task<Void, Never>?>(nil)
}
