import Foundation
import Hummingbird
import Models
import NIOCore
import ServiceKitCore
import ServiceKitDatabase

/// The signed-in caller, read from a verified access token.
public struct Caller: Sendable, Equatable {
    public var userID: UUID
    public var sessionID: UUID?
    public var roles: Set<Role>
    public var emailVerified: Bool

    public init(userID: UUID, sessionID: UUID?, roles: Set<Role>, emailVerified: Bool) {
        self.userID = userID
        self.sessionID = sessionID
        self.roles = roles
        self.emailVerified = emailVerified
    }

    public func has(_ role: Role) -> Bool { roles.contains(role) }
}

/// A context that knows its request id and, once the token middleware ran, its caller.
public protocol IdentifiedRequestContext: RequestContext {
    var requestID: String { get set }
    /// The client's address: the peer, or the address a trusted proxy forwarded (`TrustedProxies`).
    var clientAddress: String { get set }
    var caller: Caller? { get set }
    /// Why the request's bearer token was refused, if it was: the response of a route that needs a
    /// caller (`AuthenticatedContext`). Routes that need none ignore the token, so that a client that
    /// always sends its last access token can still refresh, sign in or sign up once it expired.
    var tokenProblem: APIError? { get set }
}

/// The request context of every service.
public struct ServiceRequestContext: IdentifiedRequestContext, RequestContext {
    public var coreContext: CoreRequestContextStorage
    public var requestID: String = ""
    public var clientAddress: String
    public var caller: Caller?
    public var tokenProblem: APIError?
    package var remoteAddress: SocketAddress?
    /// The client's connection: for what is the connection's to send (the gateway's `100 Continue`).
    package let channel: any Channel

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
        remoteAddress = source.channel.remoteAddress
        clientAddress = remoteAddress?.ipAddress ?? "unknown"
    }

    public var requestDecoder: APIRequestDecoder { APIRequestDecoder() }
    public var responseEncoder: APIResponseEncoder { APIResponseEncoder() }
}

/// The context of routes that need a signed-in caller: the compiler then guarantees one.
public struct AuthenticatedContext: ChildRequestContext {
    public typealias ParentContext = ServiceRequestContext
    public var coreContext: CoreRequestContextStorage
    public let requestID: String
    public let clientAddress: String
    public let caller: Caller
    package let remoteAddress: SocketAddress?

    public init(context: ServiceRequestContext) throws {
        guard let caller = context.caller else {
            throw context.tokenProblem ?? APIError.unauthorized("Sign in first: this route needs a bearer access token.", code: "unauthorized")
        }
        self.coreContext = context.coreContext
        self.requestID = context.requestID
        self.clientAddress = context.clientAddress
        self.caller = caller
        self.remoteAddress = context.remoteAddress
    }

    public var requestDecoder: APIRequestDecoder { APIRequestDecoder() }
    public var responseEncoder: APIResponseEncoder { APIResponseEncoder() }

    /// Throws 403 `forbidden` unless the caller holds one of the roles.
    public func require(anyOf roles: Role...) throws {
        guard roles.contains(where: caller.roles.contains) else {
            throw APIError.forbidden("This needs the \(roles.map(\.rawValue).joined(separator: " or ")) role.")
        }
    }
}

/// JSON request bodies with the API's date format; errors name the field.
public struct APIRequestDecoder: RequestDecoder {
    public init() {}
    public func decode<T: Decodable>(_ type: T.Type, from request: Request, context: some RequestContext) async throws -> T {
        if let contentType = request.headers[.contentType], !contentType.lowercased().contains("json") {
            throw APIError(.unsupportedMediaType, code: "unsupported_media_type", detail: "Send the body as application/json.")
        }
        let buffer: ByteBuffer
        do {
            buffer = try await request.body.collect(upTo: context.maxUploadSize)
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, code: "payload_too_large", detail: "The request body is larger than \(context.maxUploadSize) bytes.")
        }
        if buffer.readableBytes == 0 {
            throw APIError(.badRequest, code: "malformed_json", detail: "The request body is empty; send a JSON object.")
        }
        return try Self.decode(T.self, from: buffer)
    }

    static func decode<T: Decodable>(_ type: T.Type, from buffer: ByteBuffer) throws -> T {
        let data = Data(buffer.readableBytesView)
        let decoded: KeyedBody<T>
        do {
            decoded = try JSONDecoder.api.decode(KeyedBody<T>.self, from: data)
        } catch let error as DecodingError {
            throw APIError.decoding(error)
        }
        if let body = T.self as? any StrictJSONBody.Type, let keys = decoded.keys {
            let unknown = keys.filter { !body.takes($0) }.sorted()
            if !unknown.isEmpty {
                let known = body.keys.sorted().joined(separator: ", ")
                throw APIError.validation(unknown.map { .init(field: $0, message: "is not a field of this request; its fields are \(known)") })
            }
        }
        return decoded.value
    }

    /// A body decoded as `T`, with the keys of its top-level object when `T` is a `StrictJSONBody`
    /// (nil when it is not an object), read in the same pass: the JSON text is parsed once.
    struct KeyedBody<T: Decodable>: Decodable {
        let value: T
        let keys: [String]?

        init(from decoder: any Decoder) throws {
            value = try T(from: decoder)
            keys = T.self is any StrictJSONBody.Type ? (try? decoder.container(keyedBy: AnyKey.self))?.allKeys.map(\.stringValue) : nil
        }
    }
}

/// A JSON request body that names the keys it takes: a key it does not know is refused, 400 naming
/// the key, as `PATCH /v1/profiles/me` does. Otherwise a misspelt optional field is silently ignored
/// and the request done as if it were absent: `{"duration": 3600}` for `{"duration_seconds": 3600}`
/// would mute someone for ever. Every body a route decodes is one (`SourceRulesTests`).
/// The keys are the body's `CodingKeys`, which it declares `CaseIterable`, so they cannot drift apart.
public protocol StrictJSONBody: Decodable {
    associatedtype CodingKeys: CodingKey & CaseIterable
}

extension StrictJSONBody {
    static var keys: Set<String> { Set(CodingKeys.allCases.map(\.stringValue)) }
    /// Whether the body takes `key` (without building `keys`, on every request).
    static func takes(_ key: String) -> Bool { CodingKeys(stringValue: key) != nil }
}

extension Request {
    /// Decodes a JSON body that may be left out (`POST /logout` with or without options): nil when
    /// the body is empty, the same problems as `decode(as:context:)` otherwise. Only a
    /// `StrictJSONBody` is taken, so a body decoded here cannot ignore a key it does not know.
    public func decodeIfPresent<T: StrictJSONBody>(as type: T.Type, context: some RequestContext) async throws -> T? {
        if let contentType = headers[.contentType], !contentType.lowercased().contains("json") {
            throw APIError(.unsupportedMediaType, code: "unsupported_media_type", detail: "Send the body as application/json.")
        }
        let buffer: ByteBuffer
        do {
            buffer = try await body.collect(upTo: context.maxUploadSize)
        } catch is NIOTooManyBytesError {
            throw APIError(.contentTooLarge, code: "payload_too_large", detail: "The request body is larger than \(context.maxUploadSize) bytes.")
        }
        if buffer.readableBytes == 0 { return nil }
        return try APIRequestDecoder.decode(T.self, from: buffer)
    }
}

/// JSON responses in the API's one format (`APIJSON`).
/// Every response written through this encoder (what the routes return) is `Cache-Control: no-store`:
/// they carry tokens (RFC 6749 §5.1 asks this of token responses) and personal data, which neither a
/// shared cache nor the app's URL cache on disk should keep. A route that may be cached builds its
/// own `Response` with its own header (keys, avatars); health answers and problems are not cached
/// data either way.
public struct APIResponseEncoder: ResponseEncoder {
    public init() {}
    public func encode(_ value: some Encodable, from request: Request, context: some RequestContext) throws -> Response {
        EncodedJSON(body: ByteBuffer(bytes: try APIJSON.encode(value))).response
    }
}

/// A response encoded once and kept (by a `VersionedCache`), sent again as `APIResponseEncoder` sends
/// every response.
public struct EncodedJSON: ResponseGenerator, Sendable {
    public let body: ByteBuffer

    public init(_ value: some Encodable) throws {
        body = ByteBuffer(bytes: try APIJSON.encode(value))
    }

    init(body: ByteBuffer) {
        self.body = body
    }

    /// A body written elsewhere in the API's format (by PostgreSQL, from a statement that writes it
    /// as `APIJSON` would).
    public init(rendered body: ByteBuffer) {
        self.body = body
    }

    var response: Response {
        Response(status: .ok, headers: [.contentType: "application/json; charset=utf-8", .cacheControl: "no-store"], body: .init(byteBuffer: body))
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response { response }
}
