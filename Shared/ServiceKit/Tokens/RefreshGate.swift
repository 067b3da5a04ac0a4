/// Lets one task at a time run a refresh; the others wait for it and then see its result. The
/// refresh is cancelled with the task that started it, so that a process stopping does not wait
/// for a fetch nobody needs any more; a waiter that still needs one then starts its own.
actor RefreshGate {
    private var running: Task<Void, any Error>?

    func run(_ work: @escaping @Sendable () async throws -> Void) async throws {
        if let shared = running {
            _ = await shared.result
            guard shared.isCancelled, !Task.isCancelled else { return }
            if running == shared { running = nil }
            try await run(work)
            return
        }
        let task = Task { try await work() }
        running = task
        defer { if running == task { running = nil } }
        try await withTaskCancellationHandler {
            try await task.value
        } onCancel: {
            task.cancel()
        }
    }
}
