import Foundation
@testable import Gateway
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Models
import NIOCore
import OpenAPIMerge
import ServiceKit
import ServiceKitCore
import ServiceKitHTTP
import Synchronization
import Testing
import TestSupport

/// A stand-in service that serves an OpenAPI document at `/openapi.yaml` (503 while `down`), and
/// counts how often it is asked.
final class DocumentUpstream: Sendable {
    let document: Mutex<String>
    let down = Atomic<Bool>(false)
    let fetches = Atomic<Int>(0)
    private let server = LocalServer()

    init(_ document: String) { self.document = Mutex(document) }

    var baseURL: String { server.baseURL }

    func start() async throws {
        let router = Router()
        router.get("openapi.yaml") { [self] _, _ -> Response in
            fetches.add(1, ordering: .relaxed)
            if down.load(ordering: .relaxed) { return Response(status: .serviceUnavailable) }
            let text = document.withLock { $0 }
            return Response(status: .ok, headers: [.contentType: "application/yaml"], body: .init(byteBuffer: ByteBuffer(string: text)))
        }
        try await server.start(router, label: "document")
    }

    func stop() { server.stop() }
}

/// `GET /openapi.json`: the gateway's own document merged with what its upstreams serve at
/// `/openapi.yaml`, kept for its lifetime, the last merge served while a service is down, and 503
/// naming the service when there is no merge yet.
@Suite struct OpenAPIDocumentTests {
    static let auth = """
        openapi: 3.1.0
        info: { title: auth, version: 0.2.0 }
        paths:
          /healthz:
            get: { responses: { "200": { description: auth's own } } }
          /v1/auth/login:
            post:
              responses:
                "200": { description: signed in }
                "401": { description: wrong password, content: { application/problem+json: { schema: { $ref: "#/components/schemas/Problem" } } } }
        components:
          schemas:
            Page: { type: object, required: [items, next_cursor], properties: { items: { type: array }, next_cursor: { type: [string, "null"] } } }
        """

    static let social = """
        openapi: 3.1.0
        info: { title: social, version: 0.1.0 }
        paths:
          /healthz:
            get: { responses: { "200": { description: social's own } } }
          /v1/profiles:
            get:
              responses: { "200": { description: a page, content: { application/json: { schema: { $ref: "#/components/schemas/Page" } } } } }
        components:
          schemas:
            Page:
              type: object
              required: [items, next_cursor]
              properties:
                items: { type: array }
                next_cursor: { type: [string, "null"] }
        """

    static func withGateway(
        _ upstreams: [String: String], lifetime: Duration = .seconds(60), _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        var config = GatewayConfig(
            listener: .init(host: "127.0.0.1", port: 0), admin: .init(host: "127.0.0.1", port: 0), logLevel: .warning, upstreams: upstreams,
            upstreamTimeout: .seconds(5), connectTimeout: .seconds(1))
        config.openAPILifetime = lifetime
        try await buildApplication(config).test(.live) { client in try await body(client) }
    }

    /// What the gateway should answer for these upstream documents.
    static func expected(auth: String = OpenAPIDocumentTests.auth, social: String = OpenAPIDocumentTests.social) throws -> JSONValue {
        try OpenAPIMerge.merge([MergedOpenAPIDocument.ownDocument(), OpenAPISource(service: "auth", yaml: auth), OpenAPISource(service: "social", yaml: social)])
    }

    static func decoded(_ response: TestResponse) throws -> JSONValue {
        try JSONDecoder().decode(JSONValue.self, from: Data(buffer: response.body))
    }

    @Test func theGatewayServesTheMergeOfWhatItsUpstreamsServeAndKeepsIt() async throws {
        let auth = DocumentUpstream(Self.auth)
        let social = DocumentUpstream(Self.social)
        try await auth.start()
        try await social.start()
        defer { auth.stop(); social.stop() }
        try await Self.withGateway(["auth": auth.baseURL, "social": social.baseURL]) { client in
            let response = try await client.execute(uri: "/openapi.json", method: .get)
            #expect(response.status == .ok)
            #expect(response.headers[.contentType] == "application/json" && response.headers[.cacheControl] == "public, max-age=60")
            let expected = try Self.expected()
            #expect(try Self.decoded(response) == expected)
            // Sorted keys, one form: the bytes are the merge's own.
            #expect(String(buffer: response.body) == (try OpenAPIJSON.string(expected)))
            var paths: Set<String> = []
            if case .object(let items)? = expected["paths"] { paths = Set(items.keys) }
            #expect(paths.isSuperset(of: ["/healthz", "/openapi.json", "/v1/auth/login", "/v1/profiles"]), "\(paths)")
            // The gateway's /healthz, not a service's; the services' shared Page once.
            #expect(expected["paths"]?["/healthz"]?["get"]?["responses"]?["200"]?["description"] != .string("auth's own"))
            #expect(expected["components"]?["schemas"]?["Page"] != nil)

            // Kept for its lifetime: a changed document is not fetched again.
            auth.document.withLock { $0 = Self.auth.replacingOccurrences(of: "/v1/auth/login", with: "/v1/auth/signin") }
            let again = try await client.execute(uri: "/openapi.json", method: .get)
            #expect(again.status == .ok && again.body == response.body)
            #expect(auth.fetches.load(ordering: .relaxed) == 1 && social.fetches.load(ordering: .relaxed) == 1)
            #expect(try await client.execute(uri: "/openapi.json", method: .post).status == .methodNotAllowed)
        }
    }

    @Test func aServiceThatIsDownLeavesTheLastMerge() async throws {
        let auth = DocumentUpstream(Self.auth)
        let social = DocumentUpstream(Self.social)
        try await auth.start()
        try await social.start()
        defer { auth.stop(); social.stop() }
        let renamed = Self.auth.replacingOccurrences(of: "/v1/auth/login", with: "/v1/auth/signin")
        try await Self.withGateway(["auth": auth.baseURL, "social": social.baseURL], lifetime: .milliseconds(200)) { client in
            let first = try await client.execute(uri: "/openapi.json", method: .get)
            #expect(first.status == .ok)
            let firstBody = first.body

            // Past its lifetime with social down: the last merge, though auth's document changed.
            social.down.store(true, ordering: .relaxed)
            auth.document.withLock { $0 = renamed }
            try await Task.sleep(for: .milliseconds(300))
            let during = try await client.execute(uri: "/openapi.json", method: .get)
            #expect(during.status == .ok && during.body == firstBody)
            #expect(social.fetches.load(ordering: .relaxed) >= 2, "the gateway tried again")

            // Social back: a later try merges the new documents.
            social.down.store(false, ordering: .relaxed)
            try await waitUntil(.seconds(10)) { try await client.execute(uri: "/openapi.json", method: .get).body != firstBody }
            let after = try await client.execute(uri: "/openapi.json", method: .get)
            #expect(try Self.decoded(after) == Self.expected(auth: renamed))
        }
    }

    @Test func withNoMergeYetAServiceThatIsDownIs503NamingIt() async throws {
        let auth = DocumentUpstream(Self.auth)
        try await auth.start()
        defer { auth.stop() }
        let closed = try RedisServer.freePort()
        try await Self.withGateway(["auth": auth.baseURL, "social": "http://127.0.0.1:\(closed)"]) { client in
            let response = try await client.execute(uri: "/openapi.json", method: .get, headers: [.requestID: "document-1"])
            #expect(response.status == .serviceUnavailable)
            let problem = try GatewayTests.problem(response)
            #expect(problem.code == "service_unavailable" && problem.requestID == "document-1")
            #expect(problem.detail?.contains("social") == true && problem.detail?.contains("auth") == false, "\(problem.detail ?? "")")
            #expect(response.headers[.retryAfter] == "5")
        }
    }

    @Test func documentsThatDoNotMergeAre500SayingWhere() async throws {
        let auth = DocumentUpstream(Self.auth)
        // The gateway's document has a Status schema of its own.
        let social = DocumentUpstream(Self.social.replacingOccurrences(of: "    Page:\n", with: "    Status: { type: string }\n    Page:\n"))
        try await auth.start()
        try await social.start()
        defer { auth.stop(); social.stop() }
        try await Self.withGateway(["auth": auth.baseURL, "social": social.baseURL]) { client in
            let response = try await client.execute(uri: "/openapi.json", method: .get)
            #expect(response.status == .internalServerError)
            let problem = try GatewayTests.problem(response)
            #expect(problem.code == "openapi_conflict")
            #expect(problem.detail?.contains("components.schemas.Status differs between gateway and social") == true, "\(problem.detail ?? "")")
        }
    }
}
