import Hummingbird
import Models
import PostgresNIO
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import Synchronization

/// Whether start-up work (migrations) has finished, and a way to wait for it.
public final class Readiness: Sendable {
    private let state = Mutex<(ready: Bool, waiters: [Int: CheckedContinuation<Void, Never>], next: Int)>((false, [:], 0))

    public init() {}

    package var isReady: Bool { state.withLock { $0.ready } }

    package func markReady() {
        let waiters = state.withLock { state in
            state.ready = true
            defer { state.waiters = [:] }
            return state.waiters
        }
        for waiter in waiters.values { waiter.resume() }
    }

    /// Returns once ready, or at once when the task is cancelled (start-up failed, shutdown began).
    public func wait() async {
        let id = state.withLock { state in
            state.next += 1
            return state.next
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let resumeNow = state.withLock { state in
                    if state.ready || Task.isCancelled { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
            waiter?.resume()
        }
    }
}

/// `/healthz` (the process answers) on the public port; `/readyz` (database, Redis and migrations
/// OK) and `/metrics` on the internal one (`AdminListener`), with `/healthz` there too.
public struct HealthRoutes<Context: RequestContext>: Sendable {
    let postgres: PostgresClient
    let redis: RedisClient
    let readiness: Readiness
    let metrics: MetricsRegistry

    public init(postgres: PostgresClient, redis: RedisClient, readiness: Readiness, metrics: MetricsRegistry) {
        self.postgres = postgres
        self.redis = redis
        self.readiness = readiness
        self.metrics = metrics
    }

    struct Status: ResponseEncodable {
        var status: String
        var checks: [String: String]
    }

    /// The public port's: liveness only.
    public func add(to router: some RouterMethods<Context>) {
        router.get("healthz") { _, _ in Status(status: "ok", checks: [:]) }
    }

    /// The internal listener's.
    public func addAdmin(to router: some RouterMethods<Context>) {
        router.get("healthz") { _, _ in Status(status: "ok", checks: [:]) }
        router.get("readyz") { _, context -> Response in
            async let database = Self.check { try await postgres.checkedQuery("SELECT 1", logger: context.logger) }
            async let cache = Self.check { _ = try await redis.send("PING") }
            let checks = ["database": await database, "redis": await cache, "migrations": readiness.isReady ? "ok" : "pending"]
            let ok = checks.values.allSatisfy { $0 == "ok" }
            return try jsonResponse(Status(status: ok ? "ready" : "not_ready", checks: checks), status: ok ? .ok : .serviceUnavailable)
        }
        router.get("metrics") { _, _ in metricsResponse(metrics) }
    }

    static func check(_ probe: @escaping @Sendable () async throws -> Void) async -> String {
        do {
            try await withTimeout(.seconds(2)) { try await probe() }
            return "ok"
        } catch {
            return "failing: \(error)"
        }
    }
}
