import Logging
import PostgresNIO
import ServiceLifecycle

/// Deletes what can no longer be used: expired sessions (with their refresh tokens), mail tokens
/// a day after they expired, and spent provider sign-ins an hour after their nonce or token
/// expired. Every replica may run it; the deletes are idempotent.
struct AuthJanitor: Service {
    let postgres: PostgresClient
    let logger: Logger
    var interval: Duration = .seconds(600)

    func run() async throws {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do {
                try await postgres.checkedQuery("DELETE FROM sessions WHERE expires_at < now()", logger: logger)
                try await postgres.checkedQuery("DELETE FROM email_tokens WHERE expires_at < now() - interval '1 day'", logger: logger)
                // An hour late: a replica whose clock is behind the database's still refuses them then.
                try await postgres.checkedQuery("DELETE FROM spent_provider_sign_ins WHERE expires_at < now() - interval '1 hour'", logger: logger)
            } catch {
                logger.warning("auth cleanup failed; will retry", metadata: ["error": "\(error)"])
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: interval) }
        }
    }
}
