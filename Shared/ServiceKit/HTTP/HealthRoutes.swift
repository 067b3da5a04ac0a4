import Foundation
import Models
import Hummingbird
import Logging
import PostgresNIO
import Synchronization

/// Whether start-up work (migrations) has finished, and a way to wait for it.
public final class Readiness: Sendable {
    private let state = Mutex<(ready: Bool, waiters: [Int: CheckedContinuation<Void, Never>], next: Int)>((false, [:], 0))

    public init() {}

    public var isReady: Bool { state.withLock { $0.ready } }

    public func markReady() {
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

/// `/healthz` (the process answers), `/readyz` (database, Redis and migrations OK), `/metrics`.
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

    public func add(to router: some RouterMethods<Context>) {
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

/// The registry in Prometheus's text exposition format.
public func metricsResponse(_ registry: MetricsRegistry) -> Response {
    var buffer: [UInt8] = []
    registry.emit(into: &buffer)
    return Response(status: .ok, headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(bytes: buffer)))
}

/// A JSON response in the API's format with any status.
public func jsonResponse(_ value: some Encodable, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) throws -> Response {
    var headers = headers
    headers[.contentType] = "application/json; charset=utf-8"
    return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: try JSONEncoder.api.encode(value))))
}

public struct TimeoutError: Error, CustomStringConvertible {
    public var what: String
    public var limit: Duration
    public var description: String { "\(what) timed out after \(limit)" }
}

/// Runs `work`, giving up after `limit`. On time-out `work` is cancelled but not waited for: work
/// that ignores cancellation (a query on a connection whose server went away can) finishes on its
/// own later, and cannot hold the caller past the limit.
public func withTimeout<T: Sendable>(_ limit: Duration, what: String = "operation", _ work: @escaping @Sendable () async throws -> T) async throws -> T {
    let race = TimeoutRace<T>()
    return try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { continuation in
            race.start(continuation, limit: limit, timeout: TimeoutError(what: what, limit: limit), work: work)
        }
    } onCancel: {
        race.finish(.failure(CancellationError()))
    }
}

/// The state `withTimeout` shares between the work, its timer and the caller's cancellation: whoever
/// comes first resumes the caller and cancels the others.
private final class TimeoutRace<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var tasks: [Task<Void, Never>] = []
        var early: Result<T, any Error>?
    }
    private let state = Mutex(State())

    func start(_ continuation: CheckedContinuation<T, any Error>, limit: Duration, timeout: TimeoutError, work: @escaping @Sendable () async throws -> T) {
        let worker = Task {
            do { self.finish(.success(try await work())) } catch { self.finish(.failure(error)) }
        }
        let timer = Task {
            guard (try? await Task.sleep(for: limit)) != nil else { return }
            self.finish(.failure(timeout))
        }
        let early = state.withLock { state -> Result<T, any Error>? in
            state.tasks = [worker, timer]
            if let early = state.early { return early }
            state.continuation = continuation
            return nil
        }
        if let early {
            worker.cancel()
            timer.cancel()
            continuation.resume(with: early)
        }
    }

    func finish(_ result: Result<T, any Error>) {
        let (continuation, tasks) = state.withLock { state -> (CheckedContinuation<T, any Error>?, [Task<Void, Never>]) in
            if state.continuation == nil && state.early == nil && state.tasks.isEmpty { state.early = result }
            defer { state.continuation = nil }
            return (state.continuation, state.tasks)
        }
        guard let continuation else { return }
        for task in tasks { task.cancel() }
        continuation.resume(with: result)
    }
}
