import Foundation

/// The body of every error response: RFC 9457 `application/problem+json` plus a stable `code`.
public struct Problem: Codable, Sendable, Equatable, Error {
    package static let mediaType = "application/problem+json"

    public var type: String
    package var title: String
    public var status: Int
    public var detail: String?
    /// A stable machine word clients branch on, such as `invalid_credentials` or `requires_upgrade`.
    public var code: String
    /// Per-field messages for validation errors.
    public var errors: [FieldError]?
    public var requestID: String?
    /// RFC 9457 extension members, written beside the standard ones: what a client needs to act on
    /// the problem, such as the `feature` and `required_tier` of a `requires_upgrade`.
    package var extensions: [String: JSONValue]

    public init(
        status: Int, code: String, title: String, detail: String? = nil, errors: [FieldError]? = nil, requestID: String? = nil, extensions: [String: JSONValue] = [:]
    ) {
        self.type = "https://errors.foodbackend.dev/\(code)"
        self.title = title
        self.status = status
        self.detail = detail
        self.code = code
        self.errors = errors
        self.requestID = requestID
        self.extensions = extensions
    }

    public struct FieldError: Codable, Sendable, Equatable {
        package var field: String
        public var message: String
        public init(field: String, message: String) {
            self.field = field
            self.message = message
        }
    }

    enum CodingKeys: String, CodingKey, CaseIterable {
        case type, title, status, detail, code, errors, requestID = "request_id"
    }

    struct MemberKey: CodingKey {
        var stringValue: String
        var intValue: Int? { nil }
        init(stringValue: String) { self.stringValue = stringValue }
        init?(intValue: Int) { nil }
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        type = try container.decode(String.self, forKey: .type)
        title = try container.decode(String.self, forKey: .title)
        status = try container.decode(Int.self, forKey: .status)
        detail = try container.decodeIfPresent(String.self, forKey: .detail)
        code = try container.decode(String.self, forKey: .code)
        errors = try container.decodeIfPresent([FieldError].self, forKey: .errors)
        requestID = try container.decodeIfPresent(String.self, forKey: .requestID)
        let members = try decoder.container(keyedBy: MemberKey.self)
        let standard = Set(CodingKeys.allCases.map(\.stringValue))
        extensions = [:]
        for key in members.allKeys where !standard.contains(key.stringValue) {
            extensions[key.stringValue] = try members.decode(JSONValue.self, forKey: key)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(type, forKey: .type)
        try container.encode(title, forKey: .title)
        try container.encode(status, forKey: .status)
        try container.encodeIfPresent(detail, forKey: .detail)
        try container.encode(code, forKey: .code)
        try container.encodeIfPresent(errors, forKey: .errors)
        try container.encodeIfPresent(requestID, forKey: .requestID)
        let standard = Set(CodingKeys.allCases.map(\.stringValue))
        var members = encoder.container(keyedBy: MemberKey.self)
        for (key, value) in extensions.sorted(by: { $0.key < $1.key }) where !standard.contains(key) {
            try members.encode(value, forKey: MemberKey(stringValue: key))
        }
    }
}
