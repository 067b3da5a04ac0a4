import PostgresNIO
import Synchronization

/// Lets at most one lease of a pool wait in PostgresNIO's own queue; the others wait here, in order.
///
/// PostgresNIO 1.33's pool, coming back from failed connection attempts (PostgreSQL stopped, then
/// started) with more than one request queued, opens one connection per served request instead of
/// its whole minimum; a request that arrives meanwhile finds fewer connections than the minimum
/// and fails a precondition (`createNewDemandConnectionIfPossible`), which stops the process. With
/// one request queued at most, the first connection back serves it and the pool opens the rest of
/// its minimum at once, so that state is never reached. When the pool has an idle connection, the
/// gate is one uncontended lock.
package final class LeaseGate: Sendable {
    private struct State {
        var held = false
        var nextTicket: UInt64 = 0
        var waiters: [(ticket: UInt64, continuation: CheckedContinuation<Void, any Error>)] = []
    }

    private let state = Mutex(State())

    package init() {}

    /// Waits for the gate; throws `CancellationError` if the task is cancelled while it waits.
    /// Call `Pass.leave()` once the pool has handed over the connection, or failed to.
    package func enter() async throws -> Pass {
        let immediate = state.withLock { state -> UInt64? in
            if !state.held {
                state.held = true
                return nil
            }
            state.nextTicket += 1
            return state.nextTicket
        }
        guard let ticket = immediate else { return Pass(gate: self) }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let enterNow = state.withLock { state -> Bool? in
                    if Task.isCancelled { return nil }
                    if !state.held {
                        state.held = true
                        return true
                    }
                    state.waiters.append((ticket, continuation))
                    return false
                }
                switch enterNow {
                case nil: continuation.resume(throwing: CancellationError())
                case true?: continuation.resume()
                case false?: break
                }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, any Error>? in
                guard let index = state.waiters.firstIndex(where: { $0.ticket == ticket }) else { return nil }
                return state.waiters.remove(at: index).continuation
            }
            waiter?.resume(throwing: CancellationError())
        }
        return Pass(gate: self)
    }

    /// How many wait at the gate.
    package var waiting: Int { state.withLock { $0.waiters.count } }

    /// Hands the gate to the next waiter, or opens it.
    fileprivate func leave() {
        let next = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            guard !state.waiters.isEmpty else {
                state.held = false
                return nil
            }
            return state.waiters.removeFirst().continuation
        }
        next?.resume()
    }

    /// One passage through the gate; leaving twice is leaving once.
    package final class Pass: Sendable {
        private let gate: LeaseGate
        private let left = Atomic<Bool>(false)

        fileprivate init(gate: LeaseGate) { self.gate = gate }

        package func leave() {
            if !left.exchange(true, ordering: .acquiringAndReleasing) { gate.leave() }
        }

        deinit { leave() }
    }

    /// The gate of `client`'s pool. A gate is kept beside a weak reference to its client, so a new
    /// client at a freed client's address gets a gate of its own.
    package static func of(_ client: PostgresClient) -> LeaseGate {
        let key = ObjectIdentifier(client)
        return gates.withLock { gates in
            if let entry = gates[key], entry.client === client { return entry.gate }
            gates = gates.filter { $0.value.client != nil }
            let gate = LeaseGate()
            gates[key] = Entry(client: client, gate: gate)
            return gate
        }
    }

    private struct Entry: @unchecked Sendable {
        weak var client: PostgresClient?
        var gate: LeaseGate
    }

    private static let gates = Mutex<[ObjectIdentifier: Entry]>([:])
}
