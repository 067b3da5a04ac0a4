import Foundation

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

/// Waits out the end of the hour when it is less than `margin` away. A test of days (today, this
/// week, a trend) reads the day on its own clock and the service reads it again on PostgreSQL's:
/// across the top of an hour, where the day changes in every whole-hour zone the tests use (UTC,
/// UTC+14, UTC−12, Paris), the two could name different days, and the test would fail by chance.
public func clearOfTheHoursEnd(margin: Duration = .seconds(150), now: Date = Date()) async throws {
    let left = 3_600 - now.timeIntervalSince1970.truncatingRemainder(dividingBy: 3_600)
    guard left < Double(margin.components.seconds) else { return }
    try await Task.sleep(for: .seconds(left + 1))
}
