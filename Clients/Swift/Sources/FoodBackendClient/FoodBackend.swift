import FoodBackendAPI
import Foundation
import HTTPTypes
import OpenAPIRuntime

#if canImport(OpenAPIURLSession)
import OpenAPIURLSession
#endif
#if canImport(OpenAPIAsyncHTTPClient)
import AsyncHTTPClient
import OpenAPIAsyncHTTPClient
#endif

/// The app's one way to the backend: the generated operations (`api`) behind the session's token,
/// its single-flight refresh, `Idempotency-Key`s and retries, plus what the generator does not write:
/// sign-in helpers, the session as a stream, uploads, the live events and cursor pages.
public final class FoodBackend: Sendable {
    public struct Configuration: Sendable {
        /// What carries requests; by default URLSession on Apple's platforms, AsyncHTTPClient elsewhere.
        public var transport: (any ClientTransport)?
        /// What carries the live event stream, which stays open for as long as the access token lasts.
        public var streamTransport: (any ClientTransport)?
        /// The app's own middlewares, run on every attempt of every call, innermost.
        public var middlewares: [any ClientMiddleware]
        public var retry: RetryPolicy
        /// The wait before reconnecting the live stream when the server did not say (`retry:`).
        public var reconnectDelay: Duration

        public init(
            transport: (any ClientTransport)? = nil, streamTransport: (any ClientTransport)? = nil, middlewares: [any ClientMiddleware] = [],
            retry: RetryPolicy = .default, reconnectDelay: Duration = .seconds(3)
        ) {
            self.transport = transport
            self.streamTransport = streamTransport
            self.middlewares = middlewares
            self.retry = retry
            self.reconnectDelay = reconnectDelay
        }
    }

    /// Every operation of the API document, as swift-openapi-generator writes it. Call it through
    /// `send` to get `FoodBackendError`s instead of the runtime's wrapped ones.
    public let api: Client
    let streamingAPI: Client
    let sessionManager: SessionManager
    let configuration: Configuration
    public let baseURL: URL

    public init(baseURL: URL, tokenStore: any TokenStore = FoodBackend.defaultTokenStore(), configuration: Configuration = Configuration()) {
        self.baseURL = baseURL
        self.configuration = configuration
        let transport = configuration.transport ?? Self.defaultTransport(streaming: false)
        let streamTransport = configuration.streamTransport ?? configuration.transport ?? Self.defaultTransport(streaming: true)
        let clientConfiguration = OpenAPIRuntime.Configuration(dateTranscoder: RFC3339DateTranscoder())
        // The refresh goes without the token and without the refresh-on-401 (it is the refresh).
        let refreshAPI = Client(
            serverURL: baseURL, configuration: clientConfiguration, transport: transport,
            middlewares: [ProblemMiddleware(), RetryMiddleware(policy: configuration.retry)] + configuration.middlewares)
        let sessions = SessionManager(store: tokenStore) { refreshToken in
            let session = try await Self.unwrapping {
                try await refreshAPI.postV1AuthTokenRefresh(body: .json(.init(refreshToken: refreshToken))).ok.body.json
            }
            return StoredTokens(accessToken: session.accessToken, refreshToken: session.refreshToken)
        }
        sessionManager = sessions
        // Outermost first: the key is set once for all attempts; problems are read from the last answer;
        // an expired token is refreshed and the call sent again; failures on the way are retried.
        let layer: [any ClientMiddleware] = [
            IdempotencyMiddleware(), PlainHeadersMiddleware(), ImageTypeMiddleware(), ProblemMiddleware(), AuthMiddleware(sessions: sessions),
            RetryMiddleware(policy: configuration.retry),
        ]
        api = Client(serverURL: baseURL, configuration: clientConfiguration, transport: transport, middlewares: layer + configuration.middlewares)
        streamingAPI = Client(
            serverURL: baseURL, configuration: clientConfiguration, transport: streamTransport, middlewares: layer + configuration.middlewares)
    }

    static func defaultTransport(streaming: Bool) -> any ClientTransport {
        #if canImport(OpenAPIURLSession)
        return URLSessionTransport()
        #else
        // AsyncHTTPClient's timeout is for the whole exchange: a stream's lasts as long as its token.
        return AsyncHTTPClientTransport(configuration: .init(client: .shared, timeout: streaming ? .hours(24) : .seconds(60)))
        #endif
    }

    /// Runs generated operations with the layer's errors: a server's problem is thrown as
    /// `FoodBackendError`, and so is an answer the document does not describe.
    public func send<T: Sendable>(_ call: (Client) async throws -> T) async throws -> T {
        try await Self.unwrapping { try await call(api) }
    }

    /// The runtime's `ClientError` never leaves: its description prints the operation's input, which
    /// for a sign-in or a refresh holds a password or a token. A call that got no answer throws the
    /// transport's own error instead (`URLError` on Apple's platforms).
    static func unwrapping<T>(_ call: () async throws -> T) async throws -> T {
        do {
            return try await call()
        } catch let error as ClientError {
            if let problem = error.underlyingError as? FoodBackendError { throw problem }
            if error.underlyingError is CancellationError { throw CancellationError() }
            if let status = error.response?.status.code {
                throw FoodBackendError.unexpected("\(error.operationID): \(error.causeDescription): \(error.underlyingError)", status: status)
            }
            throw error.underlyingError
        }
    }

    // MARK: The session

    /// The signed-in session now and after every change (sign-in, refresh, sign-out): the app's root
    /// view observes it. The first element is the current state.
    public var sessions: AsyncStream<SignedInSession?> {
        get async { await sessionManager.observe() }
    }

    public var currentSession: SignedInSession? {
        get async { await sessionManager.current }
    }

    /// Refreshes the tokens now, for example after `roles_changed` so that the token carries the new roles.
    public func refreshSession() async throws {
        try await sessionManager.explicitRefresh()
    }

    private func adopt(_ signIn: Components.Schemas.SignIn) async throws -> Components.Schemas.SignIn {
        try await sessionManager.signedIn(StoredTokens(accessToken: signIn.session.accessToken, refreshToken: signIn.session.refreshToken))
        return signIn
    }

    /// Adopts a session the server gave in another way (a password reset's sign-in, say).
    public func adopt(_ session: Components.Schemas.Session) async throws {
        try await sessionManager.signedIn(StoredTokens(accessToken: session.accessToken, refreshToken: session.refreshToken))
    }

    @discardableResult
    public func signUp(email: String, password: String, displayName: String? = nil) async throws -> Components.Schemas.SignIn {
        let signIn = try await send {
            try await $0.postV1AuthSignup(body: .json(.init(displayName: displayName, email: email, password: password))).created.body.json
        }
        return try await adopt(signIn)
    }

    @discardableResult
    public func signIn(email: String, password: String) async throws -> Components.Schemas.SignIn {
        let signIn = try await send { try await $0.postV1AuthLogin(body: .json(.init(email: email, password: password))).ok.body.json }
        return try await adopt(signIn)
    }

    /// A nonce for one Apple or Google sign-in: give Apple `nonce.sha256` (the request's `nonce`),
    /// Google `nonce.raw`, and pass the nonce back with the ID token.
    public func signInNonce() async throws -> SignInNonce {
        let answer = try await send { try await $0.postV1AuthNonce().ok.body.json }
        return SignInNonce(raw: answer.nonce, expiresAt: answer.expiresAt)
    }

    /// Sign in with Apple: `idToken` is `ASAuthorizationAppleIDCredential.identityToken` as UTF-8,
    /// `name` its `fullName` (Apple gives it only the first time).
    @discardableResult
    public func signInWithApple(idToken: String, nonce: SignInNonce, givenName: String? = nil, familyName: String? = nil, password: String? = nil)
        async throws -> Components.Schemas.SignIn
    {
        let name: Components.Schemas.AppleRequest.NamePayload? =
            givenName == nil && familyName == nil ? nil : .case2(.init(familyName: familyName, givenName: givenName))
        let signIn = try await send {
            try await $0.postV1AuthApple(body: .json(.init(idToken: idToken, name: name, nonce: nonce.raw, password: password))).ok.body.json
        }
        return try await adopt(signIn)
    }

    @discardableResult
    public func signInWithGoogle(idToken: String, nonce: SignInNonce, password: String? = nil) async throws -> Components.Schemas.SignIn {
        let signIn = try await send {
            try await $0.postV1AuthGoogle(body: .json(.init(idToken: idToken, nonce: nonce.raw, password: password))).ok.body.json
        }
        return try await adopt(signIn)
    }

    /// How long a sign-out waits for the server to hear of it.
    static let signOutServerWait: Duration = .seconds(5)

    /// Forgets the session here at once (an app closed right after the tap does not find it again at
    /// its next launch), then ends it on the server (`everywhere`: every session of the account),
    /// waiting at most `signOutServerWait`. An expired access token is first exchanged with the
    /// session's refresh token. A session the server did not hear of ending ends when its refresh
    /// token expires.
    public func signOut(everywhere: Bool = false) async {
        guard let tokens = await sessionManager.signedOutTakingTokens() else { return }
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.endOnServer(tokens, everywhere: everywhere) }
            group.addTask { try? await Task.sleep(for: Self.signOutServerWait) }
            await group.next()
            group.cancelAll()
        }
    }

    /// The logout, signed with the forgotten session's token; with a new one when that one expired.
    private func endOnServer(_ tokens: StoredTokens, everywhere: Bool) async {
        let body = Components.Schemas.LogoutRequest(scope: everywhere ? .all : .current)
        func logOut(with token: String) async throws {
            try await AuthMiddleware.$signingWith.withValue(token) {
                _ = try await send { try await $0.postV1AuthLogout(body: .json(body)).noContent }
            }
        }
        do {
            try await logOut(with: tokens.accessToken)
        } catch let error as FoodBackendError where error.code == .tokenExpired {
            guard
                let fresh = try? await send({ try await $0.postV1AuthTokenRefresh(body: .json(.init(refreshToken: tokens.refreshToken))).ok.body.json })
            else { return }
            try? await logOut(with: fresh.accessToken)
        } catch {}
    }

    /// Forgets the session here only (the account was deleted, say).
    public func forgetSession() async {
        await sessionManager.signedOut()
    }

    // MARK: Uploads

    /// The avatar from the image's bytes (PNG, JPEG or WebP, told by its first bytes).
    public func uploadAvatar(_ image: Data) async throws -> Components.Schemas.Profile {
        let body: Operations.PutV1ProfilesMeAvatar.Input.Body
        switch ImageKind(image) {
        case .png: body = .png(HTTPBody(image))
        case .jpeg: body = .jpeg(HTTPBody(image))
        case .webp: body = .imageWebp(HTTPBody(image))
        case .heic, nil: throw FoodBackendError(status: 0, rawCode: "unsupported_image", detail: "Not a PNG, JPEG or WebP image.")
        }
        return try await send { try await $0.putV1ProfilesMeAvatar(body: body).ok.body.json }
    }
}

enum ImageKind: String {
    case png = "image/png"
    case jpeg = "image/jpeg"
    case webp = "image/webp"
    case heic = "image/heic"

    init?(_ data: Data) {
        let bytes = [UInt8](data.prefix(12))
        if bytes.starts(with: [0x89, 0x50, 0x4E, 0x47]) {
            self = .png
        } else if bytes.starts(with: [0xFF, 0xD8, 0xFF]) {
            self = .jpeg
        } else if bytes.count == 12, bytes[0..<4] == [0x52, 0x49, 0x46, 0x46], bytes[8..<12] == [0x57, 0x45, 0x42, 0x50] {
            self = .webp
        } else if bytes.count == 12, bytes[4..<8] == [0x66, 0x74, 0x79, 0x70],
            ["heic", "heix", "mif1", "msf1"].contains(String(decoding: bytes[8..<12], as: UTF8.self))
        {
            self = .heic
        } else {
            return nil
        }
    }
}
