import Crypto
import Foundation
import SwiftASN1
import X509

/// A local stand-in for Apple's signing: its own root, a WWDR-like intermediate and a
/// receipt-signing leaf, signing App Store payloads as Apple does (ES256, `x5c` of leaf,
/// intermediate, root). The service under test trusts `rootPEM` through its configuration; each
/// marker and flag can be left out to show the verifier refuses the chain.
public struct AppStoreIssuer: Sendable {
    public struct Options: Sendable {
        public var leafMarker = true
        public var intermediateMarker = true
        public var intermediateIsCA = true
        public var leafValidity: (from: Date, until: Date) = (Date(timeIntervalSinceNow: -365 * 86_400), Date(timeIntervalSinceNow: 3650 * 86_400))
        public init() {}
    }

    public let rootKey: P256.Signing.PrivateKey
    public let root: Certificate
    public let intermediateKey: P256.Signing.PrivateKey
    public let intermediate: Certificate
    public let leafKey: P256.Signing.PrivateKey
    public let leaf: Certificate

    static let intermediateMarker: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 2, 1]
    static let receiptSigningMarker: ASN1ObjectIdentifier = [1, 2, 840, 113635, 100, 6, 11, 1]

    /// A new chain; `under` another issuer, a new intermediate and leaf beneath that issuer's root.
    public init(_ options: Options = Options(), name: String = "Test", under parent: AppStoreIssuer? = nil) throws {
        let now = Date()
        let rootKey = parent?.rootKey ?? P256.Signing.PrivateKey()
        let rootName =
            try parent?.root.subject
            ?? DistinguishedName {
                CommonName("\(name) Root CA"); OrganizationName("Test Issuer")
            }
        let root =
            try parent?.root
            ?? Certificate(
                version: .v3, serialNumber: .init(), publicKey: .init(rootKey.publicKey), notValidBefore: now - 20 * 365 * 86_400,
                notValidAfter: now + 20 * 365 * 86_400, issuer: rootName, subject: rootName, signatureAlgorithm: .ecdsaWithSHA256,
                extensions: try Certificate.Extensions {
                    Critical(BasicConstraints.isCertificateAuthority(maxPathLength: nil))
                    Critical(KeyUsage(keyCertSign: true, cRLSign: true))
                    SubjectKeyIdentifier(hash: .init(rootKey.publicKey))
                },
                issuerPrivateKey: .init(rootKey))

        let intermediateKey = P256.Signing.PrivateKey()
        let intermediateName = try DistinguishedName {
            CommonName("\(name) Worldwide Developer Relations CA"); OrganizationName("Test Issuer")
        }
        var intermediateExtensions = try Certificate.Extensions {
            Critical(options.intermediateIsCA ? BasicConstraints.isCertificateAuthority(maxPathLength: 0) : BasicConstraints.notCertificateAuthority)
            Critical(KeyUsage(digitalSignature: true, keyCertSign: options.intermediateIsCA, cRLSign: options.intermediateIsCA))
            SubjectKeyIdentifier(hash: .init(intermediateKey.publicKey))
            AuthorityKeyIdentifier(keyIdentifier: try root.extensions.subjectKeyIdentifier?.keyIdentifier)
        }
        if options.intermediateMarker { try intermediateExtensions.append(Certificate.Extension(oid: Self.intermediateMarker, critical: false, value: [0x05, 0x00])) }
        let intermediate = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(intermediateKey.publicKey), notValidBefore: now - 10 * 365 * 86_400,
            notValidAfter: now + 10 * 365 * 86_400, issuer: rootName, subject: intermediateName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: intermediateExtensions, issuerPrivateKey: .init(rootKey))

        let leafKey = P256.Signing.PrivateKey()
        let leafName = try DistinguishedName {
            CommonName("\(name) Prod ECC Mac App Store and iTunes Store Receipt Signing"); OrganizationName("Test Issuer")
        }
        var leafExtensions = try Certificate.Extensions {
            Critical(BasicConstraints.notCertificateAuthority)
            Critical(KeyUsage(digitalSignature: true))
            AuthorityKeyIdentifier(keyIdentifier: try intermediate.extensions.subjectKeyIdentifier?.keyIdentifier)
        }
        if options.leafMarker { try leafExtensions.append(Certificate.Extension(oid: Self.receiptSigningMarker, critical: false, value: [0x05, 0x00])) }
        let leaf = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(leafKey.publicKey), notValidBefore: options.leafValidity.from,
            notValidAfter: options.leafValidity.until, issuer: intermediateName, subject: leafName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: leafExtensions, issuerPrivateKey: .init(intermediateKey))
        (self.rootKey, self.root, self.intermediateKey, self.intermediate, self.leafKey, self.leaf) = (rootKey, root, intermediateKey, intermediate, leafKey, leaf)
    }

    /// The root as PEM, for `APPLE_ROOT_CERTIFICATES`.
    public var rootPEM: String { (try? root.serializeAsPEM().pemString) ?? "" }

    public static func der(_ certificate: Certificate) throws -> [UInt8] {
        var serializer = DER.Serializer()
        try serializer.serialize(certificate)
        return serializer.serializedBytes
    }

    /// `payload` as a compact JWS signed by the leaf, with `x5c` of `chain` (leaf, intermediate,
    /// root unless given). `alg` other than ES256 is written as given, the signature still ES256.
    public func sign(_ payload: some Encodable, alg: String = "ES256", chain: [Certificate]? = nil, key: P256.Signing.PrivateKey? = nil) throws -> String {
        let x5c = try (chain ?? [leaf, intermediate, root]).map { Data(try Self.der($0)).base64EncodedString() }
        let header = try JSONSerialization.data(withJSONObject: ["alg": alg, "x5c": x5c], options: [.sortedKeys])
        let body = try JSONEncoder().encode(payload)
        let input = Self.base64URL(header) + "." + Self.base64URL(body)
        let signature = try (key ?? leafKey).signature(for: Data(input.utf8)).rawRepresentation
        return input + "." + Self.base64URL(signature)
    }

    public static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }
}
