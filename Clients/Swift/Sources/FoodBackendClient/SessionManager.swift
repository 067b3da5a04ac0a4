import Foundation

/// Who is signed in, read from the access token's claims: what an app's root view decides on.
public struct SignedInSession: Sendable, Equatable {
    public let userID: String
    public let sessionID: String?
    public let roles: [String]
    public let emailVerified: Bool
    /// When the access token ends; the client refreshes it by itself after that.
    public let accessTokenExpiresAt: Date?

    init?(accessToken: String) {
        let parts = accessToken.split(separator: ".")
        guard parts.count == 3 else { return nil }
        var base64 = parts[1].replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        base64 += String(repeating: "=", count: (4 - base64.count % 4) % 4)
        guard let data = Data(base64Encoded: base64), let claims = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
            let subject = claims["sub"] as? String
        else { return nil }
        userID = subject
        sessionID = claims["sid"] as? String
        roles = claims["roles"] as? [String] ?? []
        emailVerified = claims["email_verified"] as? Bool ?? false
        accessTokenExpiresAt = (claims["exp"] as? NSNumber).map { Date(timeIntervalSince1970: $0.doubleValue) }
    }
}

/// The session's tokens and the one refresh in flight. Every request whose token expired waits for
/// the same refresh; a refresh the server refuses signs the user out once and is never tried again
/// with the same refresh token.
actor SessionManager {
    typealias Refresher = @Sendable (_ refreshToken: String) async throws -> StoredTokens

    private let store: any TokenStore
    private let refresher: Refresher
    private var tokens: StoredTokens?
    /// Whether `tokens` holds the session: read from the store, or set by a sign-in or sign-out since.
    private var loaded = false
    private var loading: Task<StoredTokens?, any Error>?
    /// The refresh under way and the refresh token it started from.
    private var refreshing: (from: String, task: Task<String?, any Error>)?
    /// Which session `tokens` is: one more at each sign-in and sign-out, the same across its
    /// refreshes. A request signed with an earlier session's token is never sent again with this one's.
    private var session = 0
    private var observers: [UUID: AsyncStream<SignedInSession?>.Continuation] = [:]
    /// The store's last write: each waits for the one before, so they land in the order the session
    /// changed (a Keychain's calls run off the actor, and a save and a clear let run side by side
    /// could land the other way round, restoring a session that was signed out).
    private var lastWrite: Task<Void, any Error>?

    init(store: any TokenStore, refresher: @escaping Refresher) {
        self.store = store
        self.refresher = refresher
    }

    /// Every caller waits for the same read of the store. A store that cannot be read (a Keychain
    /// before the first unlock) is a signed-out app for now, and read again by the next caller.
    private func loadIfNeeded() async {
        guard !loaded else { return }
        let load = loading ?? Task { [store] in try await store.load() }
        loading = load
        let result = await load.result
        if loading == load { loading = nil }
        // A sign-in or sign-out while the store was read is newer than what it held.
        guard !loaded, case .success(let stored) = result else { return }
        loaded = true
        tokens = stored
        if stored != nil { publish() }
    }

    var current: SignedInSession? {
        get async {
            await loadIfNeeded()
            return tokens.flatMap { SignedInSession(accessToken: $0.accessToken) }
        }
    }

    func accessToken() async -> String? {
        await loadIfNeeded()
        return tokens?.accessToken
    }

    /// Which session is signed in now (nil: none): one more at each sign-in and sign-out.
    func signedSession() async -> Int? {
        await loadIfNeeded()
        return tokens == nil ? nil : session
    }

    /// The access token to sign a request with, and the session it is of (for `refreshed`).
    func signingToken() async -> (token: String, session: Int)? {
        await loadIfNeeded()
        return tokens.map { ($0.accessToken, session) }
    }

    func refreshToken() async -> String? {
        await loadIfNeeded()
        return tokens?.refreshToken
    }

    func signedIn(_ new: StoredTokens) async throws {
        session += 1
        try await took(new)
    }

    /// `new` as the session's tokens: a sign-in's, or a refresh's of the same session. In use at
    /// once; then stored, and a store that fails says so (the tokens stay in use).
    private func took(_ new: StoredTokens) async throws {
        loaded = true
        refreshing = nil
        tokens = new
        publish()
        try await persist { try await $0.save(new) }
    }

    /// Signs out here and returns the tokens the session had, for ending it on the server after.
    func signedOutTakingTokens() async -> StoredTokens? {
        await loadIfNeeded()
        let taken = tokens
        await signedOut()
        return taken
    }

    func signedOut() async {
        session += 1
        loaded = true
        refreshing = nil
        let wasSignedIn = tokens != nil
        tokens = nil
        if wasSignedIn { publish() }
        // Also when nothing was loaded yet: a sign-out during the store's first read must stick.
        try? await persist { try await $0.clear() }
    }

    /// The server said `session_revoked` to a request signed in `signedSession`: signed out, unless
    /// another sign-in replaced that session meanwhile.
    func ended(_ signedSession: Int) async {
        guard signedSession == session, tokens != nil else { return }
        await signedOut()
    }

    /// Runs `write` once the store's earlier writes are done, in the order of the calls: the task is
    /// made before the actor lets anything else in.
    private func persist(_ write: @escaping @Sendable (any TokenStore) async throws -> Void) async throws {
        let previous = lastWrite
        let next = Task { [store] in
            _ = await previous?.result
            try await write(store)
        }
        lastWrite = next
        try await next.value
    }

    /// A fresh access token in place of `expired`: the one already fetched if another request
    /// refreshed meanwhile, the one being fetched if a refresh is under way, else a new refresh.
    /// Nil when the session was replaced by another sign-in before the refresh ended: the request
    /// belonged to the session that ended.
    func refreshed(replacing expired: String, of signedSession: Int? = nil) async throws -> String? {
        await loadIfNeeded()
        guard let tokens else { throw FoodBackendError.notSignedIn }
        // Signed in another session since: its token is not for this request.
        if let signedSession, signedSession != session { return nil }
        if let refreshing, refreshing.from == tokens.refreshToken {
            return try await refreshing.task.value
        }
        if tokens.accessToken != expired { return tokens.accessToken }
        let refreshToken = tokens.refreshToken
        let task = Task { try await self.refresh(from: refreshToken) }
        refreshing = (refreshToken, task)
        return try await task.value
    }

    /// auth's answers to a refresh that end the session.
    static let refusals: [FoodBackendError.Code] = [.invalidRefreshToken, .sessionExpired, .refreshTokenReused, .accountDisabled]

    /// A refresh's answer is taken only if the session is still the one it refreshed: a sign-out or
    /// a new sign-in while it ran is newer, and a refused refresh of a session that ended signs
    /// nobody out.
    private func refresh(from refreshToken: String) async throws -> String? {
        defer { if refreshing?.from == refreshToken { refreshing = nil } }
        do {
            let new = try await refresher(refreshToken)
            guard tokens?.refreshToken == refreshToken else {
                if tokens == nil { throw FoodBackendError.notSignedIn }
                return nil
            }
            // A store that cannot keep them (a Keychain error) fails no request: the tokens are in
            // use, and the next refresh stores its own.
            try? await took(new)
            return new.accessToken
        } catch let error as FoodBackendError where Self.refusals.contains(error.code) {
            // The refresh token is spent, reused, or its session or account ended: sign out, once.
            // Another 401 or 403 (a captive portal's page, a proxy's refusal) says nothing of it.
            if tokens?.refreshToken == refreshToken { await signedOut() }
            throw error
        }
    }

    func explicitRefresh() async throws {
        guard let token = await accessToken() else { throw FoodBackendError.notSignedIn }
        _ = try await refreshed(replacing: token)
    }

    func observe() async -> AsyncStream<SignedInSession?> {
        await loadIfNeeded()
        let (stream, continuation) = AsyncStream.makeStream(of: SignedInSession?.self, bufferingPolicy: .unbounded)
        let id = UUID()
        observers[id] = continuation
        continuation.onTermination = { _ in Task { await self.stopObserving(id) } }
        // The state now, then each change: nothing can come between the two on the actor.
        continuation.yield(tokens.flatMap { SignedInSession(accessToken: $0.accessToken) })
        return stream
    }

    private func stopObserving(_ id: UUID) {
        observers[id] = nil
    }

    private func publish() {
        let session = tokens.flatMap { SignedInSession(accessToken: $0.accessToken) }
        for continuation in observers.values { continuation.yield(session) }
    }
}
