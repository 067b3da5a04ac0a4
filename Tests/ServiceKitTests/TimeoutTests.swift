import Dispatch
import ServiceKit
import ServiceKitCore
import ServiceKitEvents
import ServiceKitHTTP
import Testing

/// `withTimeout` gives up on time even when the work ignores cancellation (as a query on a connection
/// whose server went away can), and otherwise passes results and errors through.
@Suite struct TimeoutTests {
    struct Boom: Error {}

    @Test func workThatIgnoresCancellationCannotHoldTheCaller() async throws {
        let started = ContinuousClock.now
        await #expect(throws: TimeoutError.self) {
            try await withTimeout(.milliseconds(100)) {
                // Resumes after 300 s whatever happens: cancellation does not reach it.
                await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                    DispatchQueue.global().asyncAfter(deadline: .now() + 300) { continuation.resume() }
                }
            }
        }
        // Well before the work's 300 s. The bound is loose on purpose: a caller held by the work
        // takes the whole 300 s, while a full parallel run on two cores, its tasks' threads busy
        // with other tests' work, has delayed the timeout above by many seconds (tighter bounds
        // failed there).
        #expect(ContinuousClock.now - started < .seconds(120))
    }

    @Test func resultsAndErrorsPassThrough() async throws {
        #expect(try await withTimeout(.seconds(60)) { 42 } == 42)
        await #expect(throws: Boom.self) { try await withTimeout(.seconds(60)) { () -> Int in throw Boom() } }
        let started = ContinuousClock.now
        #expect(
            try await withTimeout(.seconds(60)) { () -> Int in
                try await Task.sleep(for: .milliseconds(50))
                return 7
            } == 7)
        // A timer that held the caller would take the whole 60 s.
        #expect(ContinuousClock.now - started < .seconds(30), "the timer does not hold the caller once the work is done")
    }

    @Test func aCancelledCallerStopsWaiting() async throws {
        let caller = Task {
            try await withTimeout(.seconds(30)) { try await Task.sleep(for: .seconds(30)) }
        }
        try await Task.sleep(for: .milliseconds(50))
        caller.cancel()
        let started = ContinuousClock.now
        await #expect(throws: CancellationError.self) { try await caller.value }
        // Against the 30 s the caller would wait if cancellation did not reach it.
        #expect(ContinuousClock.now - started < .seconds(15))
    }
}
