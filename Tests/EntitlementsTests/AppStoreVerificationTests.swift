import AppStoreServer
import Crypto
import Foundation
@testable import Entitlements
import Testing
import TestSupport
import X509

/// The verifier refuses everything Apple's library refuses, through `POST /v1/purchases/apple`
/// with a chain the test made for the purpose; the verification code is the production code.
@Suite struct AppStoreVerificationTests {
    static func refusal(_ env: EntitlementsTestEnvironment, _ jws: String, as user: EntitlementsTestEnvironment.User) async throws -> String? {
        let reply = try await env.call(.post, "/v1/purchases/apple", as: user, json: ["signed_transaction": jws])
        #expect(reply.status == .badRequest, "\(reply.text)")
        #expect(reply.code == "invalid_signed_transaction", "\(reply.text)")
        return reply.json["reason"] as? String
    }

    @Test func theNegativeMatrixIsRefused() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let user = try await env.user()
            let good = try await env.transaction(original: "1000000001", for: user)
            let issuer = env.appStore
            // Each case is refused for its own reason.
            var noLeafMarker = AppStoreIssuer.Options()
            noLeafMarker.leafMarker = false
            var noIntermediateMarker = AppStoreIssuer.Options()
            noIntermediateMarker.intermediateMarker = false
            var notCA = AppStoreIssuer.Options()
            notCA.intermediateIsCA = false
            var expiredLeaf = AppStoreIssuer.Options()
            expiredLeaf.leafValidity = (Date() - 400 * 86_400, Date() - 30 * 86_400)
            let foreign = try AppStoreIssuer(name: "Forger")
            let cases: [(String, String, String)] = [
                ("leaf without the receipt-signing OID", try Self.sameRoot(issuer, noLeafMarker).sign(good), "chain"),
                ("intermediate without the WWDR OID", try Self.sameRoot(issuer, noIntermediateMarker).sign(good), "chain"),
                ("intermediate without the CA flag", try Self.sameRoot(issuer, notCA).sign(good), "chain"),
                ("two certificates", try issuer.sign(good, chain: [issuer.leaf, issuer.intermediate]), "chain"),
                ("four certificates", try issuer.sign(good, chain: [issuer.leaf, issuer.intermediate, issuer.root, issuer.root]), "chain"),
                ("a foreign root, self-consistent, with the right OIDs", try foreign.sign(good), "chain"),
                ("a forged chain ending in the trusted root", try foreign.sign(good, chain: [foreign.leaf, foreign.intermediate, issuer.root]), "chain"),
                ("alg ES384", try issuer.sign(good, alg: "ES384"), "algorithm"),
                ("alg HS256", try issuer.sign(good, alg: "HS256"), "algorithm"),
                ("alg none", try issuer.sign(good, alg: "none"), "algorithm"),
                ("signed by another key", try issuer.sign(good, key: P256.Signing.PrivateKey()), "signature"),
                ("a tampered payload", try Self.tampered(issuer.sign(good)), "signature"),
                ("another bundle id", try issuer.sign(try await env.transaction(original: "1000000002", for: user, bundle: "com.other.app")), "bundle"),
                ("an expired leaf at signedDate", try Self.sameRoot(issuer, expiredLeaf).sign(good), "chain"),
                ("signed in the future", try issuer.sign(try await env.transaction(original: "1000000004", for: user, signed: Date() + 3600)), "future"),
                ("not a JWS", "a.b", "malformed"),
            ]
            for (name, jws, reason) in cases {
                let got = try await Self.refusal(env, jws, as: user)
                #expect(got == reason, "\(name): \(got ?? "accepted")")
            }
            #expect(try await env.count("SELECT count(*) FROM subscriptions") == 0)
            // And the good one passes, so the matrix is not refusing everything.
            #expect(try await env.buy(good, as: user).status == .ok)
        }
    }

    /// A chain verified once is remembered, and the rest of the check still holds for it: a tampered
    /// payload, another key, another algorithm, a date outside the certificates' are all refused.
    @Test func aRememberedChainStillRefusesWhatTheFullCheckRefuses() async throws {
        var options = AppStoreIssuer.Options()
        options.leafValidity = (Date() - 400 * 86_400, Date() - 30 * 86_400)
        let issuer = try AppStoreIssuer(options)
        let verifier = try SignedDataVerifier(
            .init(
                rootCertificates: [issuer.root], bundleID: EntitlementsTestEnvironment.bundleID, appAppleID: 1, environment: .production,
                acceptsLocalEnvironments: false, notificationMaxAge: 86_400))
        let old = Date() - 60 * 86_400
        let transaction = AppStoreTransaction(
            transactionID: "1", originalTransactionID: "1", bundleID: EntitlementsTestEnvironment.bundleID, productID: "com.researchapp.pro.monthly",
            purchaseDate: old, expiresDate: old + 30 * 86_400, appAccountToken: nil, environment: .production, signedDate: old)
        let good = try issuer.sign(transaction)
        for _ in 0..<2 { #expect(try await verifier.verifyTransaction(good, now: Date()).transactionID == "1") }
        func reason(_ jws: String) async -> AppStoreVerificationError.Reason? {
            do {
                _ = try await verifier.verifyTransaction(jws, now: Date())
                return nil
            } catch {
                return (error as? AppStoreVerificationError)?.reason
            }
        }
        #expect(await reason(Self.tampered(good)) == .signature)
        #expect(await reason(try issuer.sign(transaction, key: P256.Signing.PrivateKey())) == .signature)
        #expect(await reason(try issuer.sign(transaction, alg: "ES384")) == .algorithm)
        var late = transaction
        late.signedDate = Date()
        #expect(await reason(try issuer.sign(late)) == .chain, "signed after the leaf expired")
    }

    /// A payload signed while the leaf was valid still verifies after the leaf expired: the chain
    /// is checked at the payload's `signedDate`, as Apple's library does.
    @Test func theChainIsCheckedAtSignedDate() async throws {
        var options = AppStoreIssuer.Options()
        options.leafValidity = (Date() - 400 * 86_400, Date() - 30 * 86_400)
        let issuer = try AppStoreIssuer(options)
        try await EntitlementsTestEnvironment.run(appStore: issuer) { env in
            let user = try await env.user()
            let old = try await env.transaction(original: "1000000010", for: user, days: 365, purchased: Date() - 60 * 86_400, signed: Date() - 60 * 86_400)
            #expect(try await env.buy(old, as: user).status == .ok, "a restore carries an old signedDate and is not held to a window")
            let fresh = try await env.transaction(original: "1000000011", for: user)
            _ = try await Self.refusal(env, try issuer.sign(fresh), as: user)
        }
    }

    /// Xcode and StoreKit-testing payloads only outside production: this test service runs in
    /// development and takes them; the verifier a production process builds refuses them.
    @Test func localEnvironmentsOnlyInDevelopment() async throws {
        try await EntitlementsTestEnvironment.run { env in
            let user = try await env.user()
            let xcode = try await env.transaction(original: "1000000030", for: user, environment: .xcode)
            // Outside production, Xcode's StoreKit testing gives its tier whatever APPLE_ACCEPT_SANDBOX says.
            let bought = try await env.buy(xcode, as: user)
            #expect(bought.status == .ok && bought.json["tier"] as? String == "pro" && bought.json["is_sandbox"] as? Bool == true, "\(bought.text)")
            let production = try SignedDataVerifier(
                .init(
                    rootCertificates: [env.appStore.root], bundleID: EntitlementsTestEnvironment.bundleID, appAppleID: 1, environment: .production,
                    acceptsLocalEnvironments: false, notificationMaxAge: 86_400))
            for environment in [AppStoreEnvironment.xcode, .localTesting] {
                let local = try await env.transaction(original: "1000000031", for: user, environment: environment)
                await #expect(throws: AppStoreVerificationError(.environment, "payloads from the \(environment.rawValue) environment are not accepted here")) {
                    try await production.verifyTransaction(try env.appStore.sign(local), now: Date())
                }
            }
            let sandbox = try await env.transaction(original: "1000000032", for: user, environment: .sandbox)
            #expect(try await production.verifyTransaction(try env.appStore.sign(sandbox), now: Date()).environment == .sandbox)
        }
    }

    /// Sandbox payloads are accepted in production with `APPLE_ACCEPT_SANDBOX=true`, and flagged.
    @Test func sandboxPurchasesAreAcceptedAndFlagged() async throws {
        try await EntitlementsTestEnvironment.run(["APPLE_ACCEPT_SANDBOX": "true"]) { env in
            let user = try await env.user()
            let reply = try await env.buy(try await env.transaction(original: "1000000020", for: user, environment: .sandbox), as: user)
            #expect(reply.status == .ok && reply.json["is_sandbox"] as? Bool == true && reply.json["tier"] as? String == "pro")
        }
    }

    /// An issuer with `options` under the same root as `issuer` (a real intermediate of the trusted
    /// root, so only the option differs).
    static func sameRoot(_ issuer: AppStoreIssuer, _ options: AppStoreIssuer.Options) throws -> AppStoreIssuer {
        try AppStoreIssuer(options, under: issuer)
    }

    static func tampered(_ jws: String) -> String {
        let parts = jws.split(separator: ".").map(String.init)
        var payload = try! JSONSerialization.jsonObject(with: Data(base64URL: parts[1])!) as! [String: Any]
        payload["productId"] = "com.researchapp.team.monthly"
        let body = AppStoreIssuer.base64URL(try! JSONSerialization.data(withJSONObject: payload))
        return [parts[0], body, parts[2]].joined(separator: ".")
    }
}

extension Data {
    init?(base64URL text: String) {
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        self.init(base64Encoded: base64)
    }
}
