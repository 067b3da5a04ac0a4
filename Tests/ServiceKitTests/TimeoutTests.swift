import Dispatch
import ServiceKit
import Testing

/// `withTimeout` gives up on time even when the work ignores cancellation (as a query on a connection
/// whose server went away can), and otherwise passes results and errors through.
@Suite struct TimeoutTests {
    struct Boom: Error {}

    @Test func workThatIgnoresCancellationCannotHoldTheCaller() async throws {
        let started = ContinuousClock.now
        await #expect(throws: TimeoutError.self) {
            try await withTimeout(.milliseconds(100)) {
                // Resumes after 3 s whatever happens: cancellation does not reach it.
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    DispatchQueue.global().asyncAfter(deadline: .now() + 3) { continuation.resume() }
                }
            }
        }
        // Well before the work's 3 s; not tighter, as other tests share the test process's two
        // cooperative threads (it once took 1.3 s in a full parallel run).
        #expect(ContinuousClock.now - started < .milliseconds(2500))
    }

    @Test func resultsAndErrorsPassThrough() async throws {
        #expect(try await withTimeout(.seconds(5)) { 42 } == 42)
        await #expect(throws: Boom.self) { try await withTimeout(.seconds(5)) { () -> Int in throw Boom() } }
        let started = ContinuousClock.now
        #expect(try await withTimeout(.seconds(5)) { () -> Int in
            try await Task.sleep(for: .milliseconds(50))
            return 7
        } == 7)
        #expect(ContinuousClock.now - started < .seconds(2), "the timer does not hold the caller once the work is done")
    }

    @Test func aCancelledCallerStopsWaiting() async throws {
        let caller = Task {
            try await withTimeout(.seconds(30)) { try await Task.sleep(for: .seconds(30)) }
        }
        try await Task.sleep(for: .milliseconds(50))
        caller.cancel()
        let started = ContinuousClock.now
        await #expect(throws: CancellationError.self) { try await caller.value }
        #expect(ContinuousClock.now - started < .seconds(2))
    }
}
