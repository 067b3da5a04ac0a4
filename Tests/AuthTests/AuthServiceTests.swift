@testable import Auth
import Foundation
import HTTPTypes
import ServiceKit
import ServiceKitCore
import ServiceKitDatabase
import ServiceKitEvents
import ServiceKitHTTP
import ServiceKitRedis
import Testing
import TestSupport

@Suite struct AuthServiceTests {
    /// The executable's own build function boots against real PostgreSQL and Redis: migrations into
    /// its schema, readiness, health, metrics and problem+json for unknown paths.
    @Test func bootsAndServesHealth() async throws {
        let failures = try await assertServiceServesHealth(name: "auth", build: buildApplication)
        #expect(failures.isEmpty, "\(failures)")
    }
}

/// The OpenAPI document is the contract: every operation it lists is served (no route-level 404),
/// and the service answers its documented problem codes.
@Suite struct AuthContractTests {
    @Test func everyDocumentedOperationIsServed() async throws {
        let operations = try OpenAPIDocument.operations(of: "Auth")
        #expect(operations.count >= 20)
        try await AuthTestEnvironment.run { env in
            for (method, template) in operations {
                let path = template.replacingOccurrences(of: "{id}", with: UUID().uuidString).replacingOccurrences(of: "{role}", with: "creator")
                let reply = try await env.call(HTTPRequest.Method(rawValue: method.uppercased())!, path)
                // A page's own 404 (an HTML page for a link without its token) is the route answering.
                let page = reply.headers[.contentType]?.hasPrefix("text/html") == true
                #expect((reply.status != .notFound || page) && reply.status != .methodNotAllowed, "\(method) \(template): \(reply.status)")
                #expect(reply.status.code < 500, "\(method) \(template): \(reply.text)")
            }
        }
    }
}

@Suite struct PasswordListTests {
    @Test func theShippedListHasAtLeastTenThousandEntriesAndIgnoresCase() throws {
        let list = try CommonPasswordList()
        #expect(list.count >= 10_000)
        #expect(list.contains("password"))
        #expect(list.contains("PaSsWoRd"))
        #expect(list.contains("iloveyou"))
        #expect(!list.contains("correct horse battery"))
        #expect(!list.contains(""))
    }
}
