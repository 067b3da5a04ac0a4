/// A condition a test waited for did not hold in time.
public struct WaitTimedOut: Error, CustomStringConvertible {
    public var limit: Duration
    public var description: String { "condition did not hold within \(limit)" }
}

/// Polls `condition` until it holds; throws `WaitTimedOut` after `limit`, which fails the test.
public func waitUntil(_ limit: Duration = .seconds(10), _ condition: @Sendable () async throws -> Bool) async throws {
    let deadline = ContinuousClock.now + limit
    while ContinuousClock.now < deadline {
        if (try? await condition()) == true { return }
        try await Task.sleep(for: .milliseconds(25))
    }
    throw WaitTimedOut(limit: limit)
}
