import SwiftASN1
import X509

/// Apple's rules for the chain under a signed App Store payload, beyond RFC 5280's: exactly leaf,
/// intermediate and root; the intermediate is Apple's WWDR CA (its marker OID and the CA flag); the
/// leaf is a receipt-signing certificate (its marker OID). Checked on the chain the verifier built to
/// a configured root, so `x5c[2]` is never trusted for itself.
struct AppleChainPolicy: VerifierPolicy {
    /// Apple WWDR intermediate marker.
    static let intermediateMarker: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
    /// Mac App Store and App Store receipt signing marker on the leaf.
    static let receiptSigningMarker: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]

    let verifyingCriticalExtensions: [ASN1ObjectIdentifier] = []

    func chainMeetsPolicyRequirements(chain: UnverifiedCertificateChain) async -> PolicyEvaluationResult {
        guard chain.count == 3 else { return .failsToMeetPolicy(reason: "the chain is \(chain.count) certificates, not leaf, intermediate and root") }
        let leaf = chain[0]
        let intermediate = chain[1]
        guard leaf.extensions[oid: Self.receiptSigningMarker] != nil else {
            return .failsToMeetPolicy(reason: "the leaf is not an App Store receipt-signing certificate")
        }
        guard intermediate.extensions[oid: Self.intermediateMarker] != nil else {
            return .failsToMeetPolicy(reason: "the intermediate is not Apple's WWDR certificate authority")
        }
        guard case .isCertificateAuthority? = try? intermediate.extensions.basicConstraints else {
            return .failsToMeetPolicy(reason: "the intermediate is not a certificate authority")
        }
        return .meetsPolicy
    }
}
