/// A condition a test waited for did not hold in time.
public struct WaitTimedOut: Error, CustomStringConvertible {
    public var limit: Duration
    public var description: String { "condition did not hold within \(limit)" }
}

/// Polls `condition` until it holds; throws `WaitTimedOut` after `limit`, which fails the test. Each
/// check is held to the time that is left, so a check that never returns (a statement on a connection
/// the server has just closed) fails the test instead of hanging the suite.
public func waitUntil(_ limit: Duration = .seconds(10), _ condition: @escaping @Sendable () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        if (try? await withDeadline(deadline - ContinuousClock.now, "a check waited for", condition)) == true { return }
        try await Task.sleep(for: .milliseconds(25))
    }
    throw WaitTimedOut(limit: limit)
}
