import Foundation

/// The body of every error response: RFC 9457 `application/problem+json` plus a stable `code`.
public struct Problem: Codable, Sendable, Equatable, Error {
    public static let mediaType = "application/problem+json"

    public var type: String
    public var title: String
    public var status: Int
    public var detail: String?
    /// A stable machine word clients branch on, such as `invalid_credentials` or `requires_upgrade`.
    public var code: String
    /// Per-field messages for validation errors.
    public var errors: [FieldError]?
    public var requestID: String?

    public init(status: Int, code: String, title: String, detail: String? = nil, errors: [FieldError]? = nil, requestID: String? = nil) {
        self.type = "https://errors.foodbackend.dev/\(code)"
        self.title = title
        self.status = status
        self.detail = detail
        self.code = code
        self.errors = errors
        self.requestID = requestID
    }

    public struct FieldError: Codable, Sendable, Equatable {
        public var field: String
        public var message: String
        public init(field: String, message: String) {
            self.field = field
            self.message = message
        }
    }

    enum CodingKeys: String, CodingKey {
        case type, title, status, detail, code, errors, requestID = "request_id"
    }
}
