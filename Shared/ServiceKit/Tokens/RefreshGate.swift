/// Lets one task at a time run a refresh; the others wait for it and then see its result. The
/// refresh is cancelled with the task that started it, so that a process stopping does not wait
/// for a fetch nobody needs any more (the waiters then see no new keys).
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
        try await withTaskCancellationHandler {
            try await task.value
        } onCancel: {
            task.cancel()
        }
    }
}
