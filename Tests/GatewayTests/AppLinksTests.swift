import Foundation
@testable import Gateway
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import ServiceKit
import ServiceKitCore
import Testing
import TestSupport

/// The association files the phones fetch: generated from the configuration, `application/json`,
/// never a redirect, and covering every page a mail or a share link opens.
@Suite struct AppLinksTests {
    static let links = AppLinks(
        appleAppIDs: ["ABCDE12345.com.researchapp.app", "ABCDE12345.com.foodapp.app"], androidPackage: "com.researchapp.app",
        androidCertificates: [String(repeating: "AB:", count: 31) + "CD"])

    static func withGateway(_ links: AppLinks, _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void) async throws {
        var config = GatewayTests.config(everyServiceAt: "http://127.0.0.1:\(try RedisServer.freePort())", timeout: .seconds(2))
        config.appLinks = links
        try await buildApplication(config).test(.live) { client in try await body(client) }
    }

    @Test func theAppleFileCoversEveryPagePath() async throws {
        try await Self.withGateway(Self.links) { client in
            let response = try await client.execute(uri: "/.well-known/apple-app-site-association", method: .get)
            #expect(response.status == .ok && response.headers[.contentType] == "application/json")
            let json = try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: Any])
            let detail = try #require((json[path: "applinks"] as? [String: Any])?["details"] as? [[String: Any]]).first
            #expect(detail?["appIDs"] as? [String] == Self.links.appleAppIDs)
            let components = (detail?["components"] as? [[String: String]] ?? []).compactMap { $0["/"] }
            for page in AppLinks.pagePaths {
                let prefix = page.hasSuffix("*") ? String(page.dropLast()) : page
                #expect(components.contains { $0.hasPrefix(prefix) && $0.hasSuffix("*") }, "\(page) is not covered: \(components)")
            }
            for page in ["/verify-email?token=x", "/reset-password?token=x", "/invite?code=x", "/shared/abc"] {
                let path = String(page.prefix { $0 != "?" })
                #expect(components.contains { path.hasPrefix(String($0.dropLast())) }, "\(page)")
            }
            #expect((json[path: "webcredentials.apps"] as? [String]) == Self.links.appleAppIDs)
        }
    }

    @Test func theAndroidFileNamesThePackageAndItsCertificates() async throws {
        try await Self.withGateway(Self.links) { client in
            let response = try await client.execute(uri: "/.well-known/assetlinks.json", method: .get)
            #expect(response.status == .ok && response.headers[.contentType] == "application/json")
            let statements = try #require(try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [[String: Any]])
            #expect(statements.first?[path: "target.package_name"] as? String == "com.researchapp.app")
            #expect(statements.first?[path: "target.sha256_cert_fingerprints"] as? [String] == Self.links.androidCertificates)
            #expect((statements.first?["relation"] as? [String])?.contains("delegate_permission/common.handle_all_urls") == true)
        }
    }

    @Test func unconfiguredIsA404AndBadSettingsStopTheGateway() async throws {
        try await Self.withGateway(AppLinks()) { client in
            for path in ["/.well-known/apple-app-site-association", "/.well-known/assetlinks.json"] {
                let response = try await client.execute(uri: path, method: .get)
                #expect(response.status == .notFound && response.headers[.contentType] == "application/problem+json", "\(path)")
            }
        }
        #expect(throws: (any Error).self) { try GatewayConfig.load(environment: ["APPLE_APP_IDS": "com.researchapp.app"]) }
        #expect(throws: (any Error).self) { try GatewayConfig.load(environment: ["ANDROID_PACKAGE": "com.researchapp.app"]) }
        #expect(throws: (any Error).self) { try GatewayConfig.load(environment: ["ANDROID_PACKAGE": "app", "ANDROID_CERT_SHA256": "AB"]) }
        let loaded = try GatewayConfig.load(environment: ["APPLE_APP_IDS": " ABCDE12345.com.researchapp.app ,ABCDE12345.com.foodapp.app"])
        #expect(loaded.appLinks.appleAppIDs == ["ABCDE12345.com.researchapp.app", "ABCDE12345.com.foodapp.app"])
    }
}
