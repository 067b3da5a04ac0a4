import ServiceKit

/// The training service's own settings, read with the common ones.
struct TrainingSettings: Sendable {
    /// How long a request waits for a roster event from invitations still on its way (an entry a
    /// coach has just added, a client's acceptance, a former coach's unlink) before it answers with
    /// what is there (`ROSTER_WAIT_MS`).
    var rosterWait: Duration

    init(_ config: ServiceConfig) throws {
        var env = EnvironmentReader(config.environment)
        rosterWait = env.milliseconds("ROSTER_WAIT_MS", default: 3_000, range: 0...60_000)
        try env.finish()
    }
}
