import AppStoreServer
import Crypto
import Foundation
import TestSupport

/// Signed-transaction verifications per second (chain of three, Apple's policy, the ES256
/// signature) beside the raw P-256 verification rate of swift-crypto, which jwt-kit uses underneath.
/// A chain is four signature checks (two certificates, the chain's root is trusted as given, the
/// JWS itself, plus parsing), so a quarter of the raw rate is the most one could hope for.
/// Usage: AppStoreBench [seconds per figure]
let seconds = Double(CommandLine.arguments.dropFirst().first ?? "5") ?? 5
let issuer = try AppStoreIssuer()
let now = Date()
let transaction = AppStoreTransaction(
    transactionID: "2000000000000001", originalTransactionID: "2000000000000001", bundleID: "com.researchapp.app", productID: "com.researchapp.pro.monthly",
    purchaseDate: now - 60, expiresDate: now + 30 * 86_400, appAccountToken: UUID(), environment: .sandbox, signedDate: now - 1)
let jws = try issuer.sign(transaction)
let verifier = try SignedDataVerifier(
    .init(
        rootCertificates: [issuer.root], bundleID: "com.researchapp.app", appAppleID: nil, environment: .sandbox, acceptsLocalEnvironments: false,
        notificationMaxAge: 7 * 86_400))

func rate(_ label: String, _ body: () async throws -> Void) async throws -> Double {
    for _ in 0..<50 { try await body() }
    let clock = ContinuousClock()
    let start = clock.now
    var count = 0
    while (clock.now - start) < .milliseconds(Int(seconds * 1000)) {
        for _ in 0..<50 { try await body() }
        count += 50
    }
    let elapsed = clock.now - start
    let perSecond = Double(count) / (Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
    print(String(format: "%-40@ %10.0f /s", label as NSString, perSecond))
    return perSecond
}

let message = Data("header.payload".utf8)
let key = P256.Signing.PrivateKey()
let signature = try key.signature(for: message)
let raw = try await rate("raw P-256 verify (swift-crypto)") {
    guard key.publicKey.isValidSignature(signature, for: message) else { fatalError("signature") }
}
let chain = try await rate("signed transaction verify (chain + JWS)") {
    _ = try await verifier.verifyTransaction(jws, now: now)
}
print(String(format: "ratio %.3f (target >= 0.2)", chain / raw))
