/// Lets one task at a time run a refresh; the others wait for it and then see its result.
actor RefreshGate {
    private var running: Task<Void, any Error>?

    func run(_ work: @escaping @Sendable () async throws -> Void) async throws {
        if let running {
            _ = try? await running.value
            return
        }
        let task = Task { try await work() }
        running = task
        defer { running = nil }
        try await task.value
    }
}
