import Foundation
import Hummingbird
import NIOCore
import ServiceKit

/// Universal Links (Apple) and App Links (Android): the two files that tell the phones which apps
/// open the pages the services' mails and share links point to, generated from one configuration
/// and served by the gateway as `application/json`, never redirected.
struct AppLinks: Sendable, Equatable {
    /// Every page path a mail or a share link opens; both files cover each.
    static let pagePaths = ["/verify-email", "/reset-password", "/invite", "/shared/*"]

    /// `TEAMID.bundle.id` of each iOS app (`APPLE_APP_IDS`, comma-separated).
    var appleAppIDs: [String] = []
    /// The Android app's package (`ANDROID_PACKAGE`).
    var androidPackage: String?
    /// SHA-256 fingerprints of its signing certificates (`ANDROID_CERT_SHA256`, comma-separated).
    var androidCertificates: [String] = []

    init(appleAppIDs: [String] = [], androidPackage: String? = nil, androidCertificates: [String] = []) {
        self.appleAppIDs = appleAppIDs
        self.androidPackage = androidPackage
        self.androidCertificates = androidCertificates
    }

    init(reading env: inout EnvironmentReader) {
        func list(_ name: String) -> [String] {
            (env.optionalString(name) ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        appleAppIDs = list("APPLE_APP_IDS")
        androidPackage = env.optionalString("ANDROID_PACKAGE").flatMap { $0.isEmpty ? nil : $0 }
        androidCertificates = list("ANDROID_CERT_SHA256").map { $0.uppercased() }
        for id in appleAppIDs where id.wholeMatch(of: /[A-Z0-9]{10}\.[A-Za-z0-9.\-]+/) == nil {
            env.report("APPLE_APP_IDS: \"\(id)\" is not TEAMID.bundle.id (a ten-character team id, a dot, the bundle id)")
        }
        if let androidPackage, androidPackage.wholeMatch(of: /[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+/) == nil {
            env.report("ANDROID_PACKAGE: \"\(androidPackage)\" is not an Android package name")
        }
        for fingerprint in androidCertificates where fingerprint.wholeMatch(of: /[0-9A-F]{2}(:[0-9A-F]{2}){31}/) == nil {
            env.report("ANDROID_CERT_SHA256: \"\(fingerprint)\" is not a SHA-256 fingerprint (32 hex pairs separated by colons)")
        }
        if (androidPackage == nil) != androidCertificates.isEmpty {
            env.report("ANDROID_PACKAGE and ANDROID_CERT_SHA256 go together")
        }
    }

    struct SiteAssociation: Encodable {
        struct AppLinks: Encodable {
            struct Detail: Encodable {
                var appIDs: [String]
                var components: [[String: String]]
                var paths: [String]
            }
            var apps: [String] = []
            var details: [Detail]
        }
        struct Credentials: Encodable {
            var apps: [String]
        }
        var applinks: AppLinks
        var webcredentials: Credentials
    }

    /// `components` for iOS 13 and later, `paths` for the ones before; `webcredentials` so the apps
    /// may offer the passwords saved for this domain.
    var siteAssociation: SiteAssociation {
        SiteAssociation(
            applinks: .init(details: [.init(appIDs: appleAppIDs, components: Self.pagePaths.map { ["/": $0.hasSuffix("*") ? $0 : $0 + "*"] }, paths: Self.pagePaths)]),
            webcredentials: .init(apps: appleAppIDs))
    }

    struct Statement: Encodable {
        struct Target: Encodable {
            var namespace = "android_app"
            var packageName: String
            var sha256CertFingerprints: [String]
            enum CodingKeys: String, CodingKey { case namespace, packageName = "package_name", sha256CertFingerprints = "sha256_cert_fingerprints" }
        }
        var relation = ["delegate_permission/common.handle_all_urls", "delegate_permission/common.get_login_creds"]
        var target: Target
    }

    /// Android verifies the domain as a whole: every path on it, the pages above included.
    var assetLinks: [Statement] {
        guard let androidPackage else { return [] }
        return [Statement(target: .init(packageName: androidPackage, sha256CertFingerprints: androidCertificates))]
    }

    func add(to router: Router<ServiceRequestContext>) {
        let links = self
        router.get(".well-known/apple-app-site-association") { _, _ -> Response in
            guard !links.appleAppIDs.isEmpty else { throw APIError.notFound("No iOS app is configured (APPLE_APP_IDS).") }
            return try Self.json(links.siteAssociation)
        }
        router.get(".well-known/assetlinks.json") { _, _ -> Response in
            guard links.androidPackage != nil else { throw APIError.notFound("No Android app is configured (ANDROID_PACKAGE).") }
            return try Self.json(links.assetLinks)
        }
    }

    /// Exactly `application/json`, as both platforms' fetchers expect, cached for an hour.
    static func json(_ value: some Encodable) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return Response(
            status: .ok, headers: [.contentType: "application/json", .cacheControl: "public, max-age=3600"],
            body: .init(byteBuffer: ByteBuffer(bytes: try encoder.encode(value))))
    }
}
