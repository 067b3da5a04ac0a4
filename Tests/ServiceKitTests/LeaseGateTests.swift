import ServiceKitDatabase
import Testing

/// The gate in front of each pool's lease queue: one passage at a time, in order of arrival, and a
/// waiter whose task is cancelled leaves the line without holding up the others.
@Suite struct LeaseGateTests {
    @Test func waitersPassOneAtATimeInOrderOfArrival() async throws {
        let gate = LeaseGate()
        let first = try await gate.enter()
        let order = Order()
        var waiters: [Task<Void, any Error>] = []
        for index in 0..<5 {
            waiters.append(
                Task {
                    let pass = try await gate.enter()
                    await order.append(index)
                    pass.leave()
                })
            // Each waiter joins the line before the next one starts.
            while gate.waiting < index + 1 { await Task.yield() }
        }
        #expect(await order.values.isEmpty)
        first.leave()
        for waiter in waiters { try await waiter.value }
        #expect(await order.values == [0, 1, 2, 3, 4])
        // Leaving twice is leaving once: the gate is open exactly once more.
        first.leave()
        let again = try await gate.enter()
        again.leave()
    }

    @Test func aCancelledWaiterLeavesTheLineAndTheNextOnePasses() async throws {
        let gate = LeaseGate()
        let holder = try await gate.enter()
        let cancelled = Task { _ = try await gate.enter() }
        while gate.waiting < 1 { await Task.yield() }
        let next = Task { try await gate.enter().leave() }
        while gate.waiting < 2 { await Task.yield() }
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(gate.waiting == 1)
        holder.leave()
        try await next.value
        #expect(gate.waiting == 0)
    }
}

private actor Order {
    var values: [Int] = []
    func append(_ value: Int) { values.append(value) }
}
