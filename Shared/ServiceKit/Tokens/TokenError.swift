import ServiceKitHTTP

/// Why a token was refused. Each maps to a 401 with a stable code.
public enum TokenError: Error, Equatable, CustomStringConvertible {
    case malformed(String)
    case unsupportedAlgorithm(String)
    case unknownKey(String)
    case badSignature
    case expired
    case notYetValid
    case wrongIssuer(String)
    case wrongAudience
    case invalidClaims(String)
    case keysUnavailable(String)

    public var description: String {
        switch self {
        case .malformed(let why): "malformed token: \(why)"
        case .unsupportedAlgorithm(let alg): "algorithm \(alg) is not accepted; tokens are ES256"
        case .unknownKey(let kid): "no key with kid \(kid)"
        case .badSignature: "signature does not verify"
        case .expired: "token has expired"
        case .notYetValid: "token is not valid yet"
        case .wrongIssuer(let iss): "token was issued by \(iss), not by this backend"
        case .wrongAudience: "token is not meant for this backend"
        case .invalidClaims(let why): "token claims are invalid: \(why)"
        case .keysUnavailable(let why): "signing keys unavailable: \(why)"
        }
    }

    /// The problem the client sees.
    public var apiError: APIError {
        switch self {
        case .expired: .unauthorized("The access token has expired; refresh it.", code: "token_expired")
        case .keysUnavailable: APIError(.serviceUnavailable, code: "keys_unavailable", detail: "Tokens cannot be checked right now; try again shortly.")
        default: .unauthorized("The access token is invalid: \(description).", code: "invalid_token")
        }
    }
}
