import Foundation
import Hummingbird
import Logging
import NIOCore
import NIOHTTP1
import OpenAPIMerge
import ServiceKit
import Synchronization

/// `GET /openapi.json`: everything behind the gateway in one OpenAPI document. The gateway's own
/// `openapi.yaml` (a resource of this target) comes first, then each upstream's `GET /openapi.yaml`
/// (the kit's `OpenAPIDocumentRoute`), fetched over the upstream pools and merged by `OpenAPIMerge`.
///
/// A merge is kept for `lifetime` (60 s) and fetched again by the first request after that; requests
/// that arrive meanwhile wait for the same fetch. When a fetch fails (an upstream down, a document
/// that does not merge) the last good merge is served on, and the next try waits a few seconds; with
/// no merge yet the response is `503 service_unavailable` naming the services that could not be read,
/// or `500 openapi_conflict` saying what does not merge.
final class MergedOpenAPIDocument: Sendable {
    let own: OpenAPISource
    let upstreams: [(service: String, pool: UpstreamPool)]
    let lifetime: Duration
    let timeout: Duration
    let logger: Logger
    private let state = Mutex(State())

    /// A document above this is not an API document.
    static let maxDocumentBytes = 4 << 20

    private struct State {
        var merged: Merged?
        var fetch: Task<ByteBuffer, any Error>?
    }

    private struct Merged {
        var body: ByteBuffer
        var freshUntil: ContinuousClock.Instant
    }

    init(own: OpenAPISource, pools: [String: UpstreamPool], lifetime: Duration, timeout: Duration, logger: Logger) {
        self.own = own
        self.upstreams = pools.sorted { $0.key < $1.key }.map { (service: $0.key, pool: $0.value) }
        self.lifetime = lifetime
        self.timeout = timeout
        self.logger = logger
    }

    /// The gateway's own document, from its resource bundle.
    static func ownDocument() throws -> OpenAPISource {
        guard let url = Bundle.module.url(forResource: "openapi", withExtension: "yaml") else {
            throw OpenAPIMergeError.notADocument(service: "gateway", reason: "openapi.yaml is not in the gateway's resources")
        }
        return try OpenAPISource(service: "gateway", yaml: String(contentsOf: url, encoding: .utf8))
    }

    func add(to router: Router<ServiceRequestContext>) {
        let cacheControl = "public, max-age=\(lifetime.components.seconds)"
        router.get("openapi.json") { _, context -> Response in
            let body = try await self.document(requestID: context.requestID)
            return Response(status: .ok, headers: [.contentType: "application/json", .cacheControl: cacheControl], body: .init(byteBuffer: body))
        }
    }

    /// The merge, as compact JSON with sorted keys.
    func document(requestID: String) async throws -> ByteBuffer {
        let now = ContinuousClock.now
        let (fresh, fetch) = state.withLock { state -> (ByteBuffer?, Task<ByteBuffer, any Error>?) in
            if let merged = state.merged, now < merged.freshUntil { return (merged.body, nil) }
            if let running = state.fetch { return (nil, running) }
            let started = Task { try await self.refresh(requestID: requestID) }
            state.fetch = started
            return (nil, started)
        }
        if let fresh { return fresh }
        return try await fetch!.value
    }

    /// Fetches and merges; on failure the last good merge, kept a few seconds more, or the problem.
    private func refresh(requestID: String) async throws -> ByteBuffer {
        do {
            let body = try await fetchAndMerge(requestID: requestID)
            let freshUntil = ContinuousClock.now + lifetime
            state.withLock { state in
                state.merged = Merged(body: body, freshUntil: freshUntil)
                state.fetch = nil
            }
            return body
        } catch {
            logger.warning("API document not merged", metadata: ["error": "\(error)", "request_id": "\(requestID)"])
            let retryAt = ContinuousClock.now + min(lifetime, .seconds(5))
            let last = state.withLock { state -> ByteBuffer? in
                state.fetch = nil
                guard var merged = state.merged else { return nil }
                merged.freshUntil = retryAt
                state.merged = merged
                return merged.body
            }
            if let last { return last }
            throw Self.problem(for: error)
        }
    }

    private func fetchAndMerge(requestID: String) async throws -> ByteBuffer {
        // One after another, in the upstreams' (name) order: five small documents once a minute.
        var sources = [own]
        var failed: [(service: String, error: any Error)] = []
        for upstream in upstreams {
            do {
                sources.append(try await fetch(upstream.service, from: upstream.pool, requestID: requestID))
            } catch {
                failed.append((service: upstream.service, error: error))
            }
        }
        if !failed.isEmpty { throw FetchFailure(failed: failed) }
        let merged = try OpenAPIMerge.merge(sources)
        return ByteBuffer(bytes: try OpenAPIJSON.encode(merged))
    }

    /// One upstream's `GET /openapi.yaml`, parsed.
    private func fetch(_ service: String, from pool: UpstreamPool, requestID: String) async throws -> OpenAPISource {
        let head = HTTPRequestHead(
            version: .http1_1, method: .GET, uri: OpenAPIDocumentRoute.path,
            headers: HTTPHeaders([("Accept", "application/yaml"), ("X-Request-ID", requestID)]))
        let response = try await pool.execute(head, body: .none, deadline: .now() + TimeAmount(timeout))
        var body: ByteBuffer
        switch response.body {
        case .complete(let whole):
            body = whole
        case .stream(let stream):
            body = ByteBuffer()
            for try await chunk in stream {
                guard body.readableBytes + chunk.readableBytes <= Self.maxDocumentBytes else { throw FetchFailure.Reason("its document is over \(Self.maxDocumentBytes) bytes") }
                body.writeImmutableBuffer(chunk)
            }
        }
        guard response.head.status == .ok else { throw FetchFailure.Reason("GET /openapi.yaml answered \(response.head.status.code)") }
        return try OpenAPISource(service: service, yaml: String(buffer: body))
    }

    /// Some upstreams' documents could not be had.
    struct FetchFailure: Error, CustomStringConvertible {
        var failed: [(service: String, error: any Error)]

        var services: [String] { failed.map(\.service) }
        var description: String { failed.map { "\($0.service): \($0.error)" }.joined(separator: "; ") }

        struct Reason: Error, CustomStringConvertible {
            var description: String
            init(_ description: String) { self.description = description }
        }
    }

    static func problem(for error: any Error) -> APIError {
        switch error {
        case let failure as FetchFailure:
            let names = failure.services.joined(separator: ", ")
            let subject = failure.services.count == 1 ? "The \(names) service's API document" : "The API documents of \(names)"
            return APIError(
                .serviceUnavailable, code: "service_unavailable", detail: "\(subject) could not be fetched; try again shortly.",
                headers: [.retryAfter: "5"])
        case let conflict as OpenAPIMergeError:
            return APIError(.internalServerError, code: "openapi_conflict", detail: "The API documents do not merge: \(conflict)")
        default:
            return APIError(.internalServerError, code: "internal_error", detail: "The API document could not be built.")
        }
    }
}
