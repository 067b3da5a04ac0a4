import AppStoreServer
import Foundation
import HTTPTypes
import Models
@testable import Entitlements
import Testing
import TestSupport

/// Server notifications that are not signed App Store payloads in shape are refused before any
/// certificate is parsed or any chain checked: that step is the costly one, and the webhook needs no
/// account.
@Suite struct WebhookPayloadTests {
    typealias Env = EntitlementsTestEnvironment

    static func part(_ json: Any) throws -> String {
        AppStoreIssuer.base64URL(try JSONSerialization.data(withJSONObject: json, options: [.sortedKeys]))
    }

    @Test func aMalformedPayloadIsRefusedWithoutCertificateWork() async throws {
        let adminPort = try RedisServer.freePort()
        try await Env.run(["ADMIN_HTTP_PORT": String(adminPort)]) { env in
            @Sendable func chainChecks() async throws -> Int {
                Int(try await MetricsScrape.value("app_store_chain_checks_total", port: adminPort) ?? -1)
            }
            #expect(try await chainChecks() == 0)
            // A real notification, taken apart: its header's certificates, its payload and signature.
            let transaction = try await env.transaction(original: "3000000001", token: UUID())
            let good = try env.notification("SUBSCRIBED", subtype: "INITIAL_BUY", transaction: transaction, renewal: env.renewal(transaction))
            let parts = good.split(separator: ".").map(String.init)
            let x5c = [env.appStore.leaf, env.appStore.intermediate, env.appStore.root].map { try! Data(AppStoreIssuer.der($0)).base64EncodedString() }
            let body = parts[1]
            let signature = parts[2]
            let notDER = Data(repeating: 0x41, count: 600).base64EncodedString()
            let hugeCertificate = Data([0x30, 0x82, 0x4E, 0x20] + [UInt8](repeating: 0, count: 20_000)).base64EncodedString()
            let malformed: [(String, String)] = [
                ("two parts", "\(parts[0]).\(body)"),
                ("header not base64url", "%%%.\(body).\(signature)"),
                ("header not JSON", "\(AppStoreIssuer.base64URL(Data("not json".utf8))).\(body).\(signature)"),
                ("not ES256", "\(try Self.part(["alg": "HS256", "x5c": x5c])).\(body).\(signature)"),
                ("no x5c", "\(try Self.part(["alg": "ES256"])).\(body).\(signature)"),
                ("x5c not an array", "\(try Self.part(["alg": "ES256", "x5c": "abc"])).\(body).\(signature)"),
                ("two certificates", "\(try Self.part(["alg": "ES256", "x5c": Array(x5c.prefix(2))])).\(body).\(signature)"),
                ("certificates not base64", "\(try Self.part(["alg": "ES256", "x5c": ["!!", "??", "**"]])).\(body).\(signature)"),
                ("certificates not DER", "\(try Self.part(["alg": "ES256", "x5c": [notDER, notDER, notDER]])).\(body).\(signature)"),
                ("a certificate too large", "\(try Self.part(["alg": "ES256", "x5c": [hugeCertificate, x5c[1], x5c[2]]])).\(body).\(signature)"),
                ("signature not 64 bytes", "\(parts[0]).\(body).\(AppStoreIssuer.base64URL(Data(repeating: 7, count: 20)))"),
                ("signature not base64url", "\(parts[0]).\(body).%%%"),
                ("payload not JSON", "\(parts[0]).\(AppStoreIssuer.base64URL(Data("nope".utf8))).\(signature)"),
                ("oversized", "\(parts[0]).\(AppStoreIssuer.base64URL(Data(repeating: 0x20, count: 120_000))).\(signature)"),
            ]
            for (what, payload) in malformed {
                let refused = try await env.deliver(payload)
                #expect(refused.status == .badRequest && refused.code == "invalid_notification", "\(what): \(refused.text)")
                #expect(refused.headers[.contentType] == "application/problem+json", "\(what)")
                #expect(try await chainChecks() == 0, "\(what) reached the certificates")
            }
            // The real one is checked (its chain once) and recorded.
            let delivered = try await env.deliver(good)
            #expect(delivered.status == .ok, "\(delivered.text)")
            #expect(try await chainChecks() >= 1)
        }
    }
}
