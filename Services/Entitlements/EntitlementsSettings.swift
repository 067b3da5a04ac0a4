import AppStoreServer
import Foundation
import ServiceKit
import X509

/// The entitlements service's own settings, read with the common ones.
struct EntitlementsSettings: Sendable {
    /// The catalogue file (`ENTITLEMENTS_CATALOG`); empty means the shipped one.
    var catalogPath: String?
    /// How App Store payloads are checked (roots, bundle, app, environment).
    var appStore: SignedDataVerifier.Configuration
    /// What happens to a transaction whose `appAccountToken` is another user's: `refuse` (409) or
    /// `transfer` (it moves to the caller).
    var transferPolicy: TransferPolicy
    /// Users whose entitlement inputs each process keeps, in each of two generations; 0 keeps none.
    var inputsCacheSize: Int
    /// Whether kept inputs are served without reading their version while the change feed vouches
    /// (`ENTITLEMENT_CHANGE_FEED`); off behind a pooler that cannot `LISTEN` (PgBouncer in
    /// transaction mode).
    var changeFeed: Bool
    /// Whether sandbox payloads (TestFlight, App Review) give tiers: always when `APPLE_ENVIRONMENT`
    /// is sandbox; in production only with `APPLE_ACCEPT_SANDBOX=true`, since a sandbox subscription
    /// costs its tester nothing.
    var acceptsSandbox: Bool
    /// How often the entitlements that changed by the clock alone (a subscription's or grant's end)
    /// are looked for and announced (`ENTITLEMENT_EXPIRY_SWEEP_MS`).
    var expirySweepInterval: Duration

    enum TransferPolicy: String, Sendable { case refuse, transfer }

    init(_ config: ServiceConfig) throws {
        var env = EnvironmentReader(config.environment)
        catalogPath = env.optionalString("ENTITLEMENTS_CATALOG")
        let rootPaths = env.optionalString("APPLE_ROOT_CERTIFICATES")
        let bundleID = env.string("APPLE_BUNDLE_ID", default: "com.researchapp.app", requiredInProduction: true)
        let appAppleIDText = env.optionalString("APPLE_APP_APPLE_ID")
        let environment = env.oneOf("APPLE_ENVIRONMENT", default: "sandbox", allowed: ["production", "sandbox"], requiredInProduction: true) == "production" ? "Production" : "Sandbox"
        let maxAgeDays = env.int("APPLE_NOTIFICATION_MAX_AGE_DAYS", default: 7, range: 1...365)
        transferPolicy = TransferPolicy(rawValue: env.oneOf("APPLE_TRANSFER_POLICY", default: "refuse", allowed: ["refuse", "transfer"])) ?? .refuse
        inputsCacheSize = env.int("ENTITLEMENT_CACHE_SIZE", default: 10_000, range: 0...1_000_000)
        changeFeed = env.bool("ENTITLEMENT_CHANGE_FEED", default: true)
        acceptsSandbox = env.bool("APPLE_ACCEPT_SANDBOX", default: false) || environment != "Production"
        expirySweepInterval = env.milliseconds("ENTITLEMENT_EXPIRY_SWEEP_MS", default: 30_000, range: 100...3_600_000)
        var appAppleID: Int64?
        if let appAppleIDText, !appAppleIDText.isEmpty {
            if let value = Int64(appAppleIDText), value > 0 { appAppleID = value } else { env.report("APPLE_APP_APPLE_ID must be the app's numeric Apple id, got \"\(appAppleIDText)\"") }
        } else if environment == "Production" {
            env.report("APPLE_APP_APPLE_ID is required when APPLE_ENVIRONMENT is Production (production notifications are checked against it)")
        }
        var roots: [Certificate] = []
        do {
            roots = try Self.roots(rootPaths)
        } catch {
            env.report("APPLE_ROOT_CERTIFICATES: \(error)")
        }
        appStore = SignedDataVerifier.Configuration(
            rootCertificates: roots, bundleID: bundleID, appAppleID: appAppleID, environment: AppStoreEnvironment(rawValue: environment) ?? .sandbox,
            acceptsLocalEnvironments: !config.isProduction, notificationMaxAge: TimeInterval(maxAgeDays) * 86_400)
        try env.finish()
    }

    struct RootProblem: Error, CustomStringConvertible {
        var description: String
    }

    /// The trusted roots: each path a PEM (one or more certificates) or DER file; none given means
    /// Apple Root CA - G3, shipped with the service.
    static func roots(_ paths: String?) throws -> [Certificate] {
        let files = (paths ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        if files.isEmpty {
            guard let url = Bundle.module.url(forResource: "AppleRootCA-G3", withExtension: "pem", subdirectory: "Resources") else {
                throw RootProblem(description: "Apple Root CA - G3 is missing from the bundle")
            }
            return [try Certificate(pemEncoded: try String(contentsOf: url, encoding: .utf8))]
        }
        return try files.flatMap { path -> [Certificate] in
            guard let data = FileManager.default.contents(atPath: path) else { throw RootProblem(description: "cannot read \(path)") }
            if let text = String(data: data, encoding: .utf8), text.contains("-----BEGIN CERTIFICATE-----") {
                let pems = text.components(separatedBy: "-----END CERTIFICATE-----").filter { $0.contains("-----BEGIN CERTIFICATE-----") }
                return try pems.map { try Certificate(pemEncoded: $0 + "-----END CERTIFICATE-----") }
            }
            do { return [try Certificate(derEncoded: [UInt8](data))] } catch { throw RootProblem(description: "\(path) is neither PEM nor DER certificate") }
        }
    }
}
