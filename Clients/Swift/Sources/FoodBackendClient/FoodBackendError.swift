import Foundation

/// Every error the server answers (its problem+json body) and the few the client raises itself, as
/// one type: switch on `code`.
public struct FoodBackendError: Error, Sendable, CustomStringConvertible {
    public struct FieldError: Sendable, Equatable, Codable {
        public let field: String
        public let message: String
    }

    /// The stable codes an app is likely to branch on; any other is `.other` with the server's word.
    public enum Code: Sendable, Equatable {
        case emailTaken
        case invalidCredentials
        case invalidEmail
        case weakPassword
        case validationFailed
        case malformedJSON
        case unauthorized
        case invalidToken
        case tokenExpired
        case sessionRevoked
        case sessionExpired
        case invalidRefreshToken
        case refreshTokenReused
        case accountDisabled
        /// The account was deleted (on another device, say): the app is signed out.
        case accountDeleted
        /// The caller's address is not verified yet (`email_unverified`).
        case emailNotVerified
        case forbidden
        case notFound
        case requiresUpgrade(requiredTier: String?)
        case limitExceeded
        case rateLimited
        /// A body over its route's limit: a service's `too_large` or the gateway's `payload_too_large`.
        case tooLarge
        case unsupportedImage
        case idempotencyKeyInUse
        case idempotencyKeyReused
        case invalidTicket
        case invalidCursor
        /// The client holds no session: sign in first (also after a refresh that failed signed the user out).
        case notSignedIn
        /// The server answered something the document does not describe.
        case unexpectedResponse
        case other(String)

        init(_ word: String, extensions: [String: String]) {
            switch word {
            case "email_taken": self = .emailTaken
            case "invalid_credentials": self = .invalidCredentials
            case "invalid_email": self = .invalidEmail
            case "weak_password": self = .weakPassword
            case "validation_failed": self = .validationFailed
            case "malformed_json": self = .malformedJSON
            case "unauthorized": self = .unauthorized
            case "invalid_token": self = .invalidToken
            case "token_expired": self = .tokenExpired
            case "session_revoked": self = .sessionRevoked
            case "session_expired": self = .sessionExpired
            case "invalid_refresh_token": self = .invalidRefreshToken
            case "refresh_token_reused": self = .refreshTokenReused
            case "account_disabled": self = .accountDisabled
            case "account_deleted": self = .accountDeleted
            case "email_unverified": self = .emailNotVerified
            case "forbidden": self = .forbidden
            case "not_found": self = .notFound
            case "requires_upgrade": self = .requiresUpgrade(requiredTier: extensions["required_tier"])
            case "limit_exceeded": self = .limitExceeded
            case "rate_limited": self = .rateLimited
            case "too_large", "payload_too_large": self = .tooLarge
            case "unsupported_image": self = .unsupportedImage
            case "idempotency_key_in_use": self = .idempotencyKeyInUse
            case "idempotency_key_reused": self = .idempotencyKeyReused
            case "invalid_ticket": self = .invalidTicket
            case "invalid_cursor": self = .invalidCursor
            default: self = .other(word)
            }
        }
    }

    /// The HTTP status; 0 for the client's own errors.
    public let status: Int
    public let code: Code
    /// The server's `code` as sent (`not_signed_in` / `unexpected_response` for the client's own).
    public let rawCode: String
    public let title: String?
    public let detail: String?
    public let fieldErrors: [FieldError]
    public let requestID: String?
    /// Seconds to wait before retrying, from `Retry-After`.
    public let retryAfter: Int?
    /// The problem's other members written as text (for example `feature` and `required_tier`).
    public let extensions: [String: String]

    public init(
        status: Int, rawCode: String, title: String? = nil, detail: String? = nil, fieldErrors: [FieldError] = [],
        requestID: String? = nil, retryAfter: Int? = nil, extensions: [String: String] = [:]
    ) {
        self.status = status
        self.rawCode = rawCode
        self.title = title
        self.detail = detail
        self.fieldErrors = fieldErrors
        self.requestID = requestID
        self.retryAfter = retryAfter
        self.extensions = extensions
        switch rawCode {
        case "not_signed_in": self.code = .notSignedIn
        case "unexpected_response": self.code = .unexpectedResponse
        default: self.code = Code(rawCode, extensions: extensions)
        }
    }

    static let notSignedIn = FoodBackendError(status: 0, rawCode: "not_signed_in", detail: "Sign in first.")

    static func unexpected(_ detail: String, status: Int = 0) -> FoodBackendError {
        FoodBackendError(status: status, rawCode: "unexpected_response", detail: detail)
    }

    /// Reads an `application/problem+json` body; nil when it is not one.
    static func problem(status: Int, body: Data, retryAfter: Int?) -> FoodBackendError? {
        guard let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any], let code = object["code"] as? String else {
            return nil
        }
        var extensions: [String: String] = [:]
        for (key, value) in object where !["type", "title", "status", "code", "detail", "errors", "request_id"].contains(key) {
            switch value {
            case let text as String: extensions[key] = text
            case let number as NSNumber: extensions[key] = number.stringValue
            default:
                if let data = try? JSONSerialization.data(withJSONObject: value, options: [.fragmentsAllowed, .sortedKeys]) {
                    extensions[key] = String(decoding: data, as: UTF8.self)
                }
            }
        }
        let fields = (object["errors"] as? [[String: Any]] ?? []).compactMap { entry -> FieldError? in
            guard let field = entry["field"] as? String, let message = entry["message"] as? String else { return nil }
            return FieldError(field: field, message: message)
        }
        return FoodBackendError(
            status: status, rawCode: code, title: object["title"] as? String, detail: object["detail"] as? String, fieldErrors: fields,
            requestID: object["request_id"] as? String, retryAfter: retryAfter, extensions: extensions)
    }

    public var description: String {
        "\(status) \(rawCode)" + (detail.map { ": \($0)" } ?? "") + (fieldErrors.isEmpty ? "" : " \(fieldErrors.map { "\($0.field): \($0.message)" })")
    }
}
