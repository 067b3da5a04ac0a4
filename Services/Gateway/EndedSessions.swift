import Foundation
import Logging
import ServiceKit
import Synchronization

/// Sessions that ended (a sign-out, a takeover, a password reset) and accounts deleted, as this
/// process heard them on the live subscription (`LiveHub`), for every user: a request through the
/// gateway bearing a token of one is marked so (`X-Session-Ended`), and a route of a service that
/// needs a caller answers it `401 session_revoked`, where it would otherwise take the token until
/// it expires. Kept by user in two generations, the older dropped as a new one starts every
/// `generation`: an ending is kept from one to two generations, longer than any access token lives
/// (`ACCESS_TOKEN_TTL_SECONDS` is at most 900), each record and lookup a dictionary's work. At most
/// `capacity` users a generation: past it a new user's ending is not kept (and logged), so that a
/// flood cannot push out the endings already heard.
final class EndedSessions: Sendable {
    static let generation: Duration = .seconds(16 * 60)
    private let capacity: Int
    private let logger: Logger
    private let state: Mutex<State>
    /// Read without the lock on every request: nothing ended within the last two generations,
    /// nothing to look up.
    private let isEmpty = Atomic<Bool>(true)

    private struct State {
        var current: [UUID: LiveEnding] = [:]
        var previous: [UUID: LiveEnding] = [:]
        var started: ContinuousClock.Instant
    }

    init(capacity: Int = 200_000, logger: Logger = Logger(label: "gateway"), now: ContinuousClock.Instant = .now) {
        self.capacity = capacity
        self.logger = logger
        self.state = Mutex(State(started: now))
    }

    /// Adds what a live entry of `user` ended to what was heard of them before. A session that ended
    /// never starts again, nor does a deleted account, so what is merged is never taken back.
    func record(_ ending: LiveEnding, of user: UUID, now: ContinuousClock.Instant = .now) {
        let kept = state.withLock { state -> Bool in
            Self.advance(&state, to: now, isEmpty: isEmpty)
            guard state.current[user] != nil || state.current.count < capacity else { return false }
            state.current[user] = (state.current[user] ?? state.previous[user])?.merging(ending) ?? ending
            isEmpty.store(false, ordering: .relaxed)
            return true
        }
        if !kept { logger.warning("too many users' sessions ended at once to keep them all; a token of this one is not refused", metadata: ["user_id": "\(user)"]) }
    }

    /// Whether a token of `user` and `session` is one whose session ended, or whose account is gone.
    func ended(user: UUID, session: UUID?, now: ContinuousClock.Instant = .now) -> Bool {
        guard !isEmpty.load(ordering: .relaxed) else { return false }
        return state.withLock { state in
            Self.advance(&state, to: now, isEmpty: isEmpty)
            return state.current[user]?.ends(session: session) == true || state.previous[user]?.ends(session: session) == true
        }
    }

    /// Whether the bearer token of `authorization` is one whose session ended here: read from this
    /// process's verified tokens when it is among them, otherwise from its payload unverified, which
    /// is enough to mark it (a forged token naming an ended session is refused anyway). Nothing is
    /// read while nothing has ended.
    func endsToken(of authorization: String, verifier: TokenVerifier, now: Date = Date()) -> Bool {
        guard !isEmpty.load(ordering: .relaxed), let token = TokenMiddleware<ServiceRequestContext>.bearerToken(authorization) else { return false }
        if let caller = verifier.cachedCaller(token, now: now) { return ended(user: caller.userID, session: caller.sessionID) }
        guard let (user, session) = JWTHeaderPeek.subject(of: token) else { return false }
        return ended(user: user, session: session)
    }

    /// Starts the generations that are due: one, or two after a long quiet (both dropped).
    private static func advance(_ state: inout State, to now: ContinuousClock.Instant, isEmpty: borrowing Atomic<Bool>) {
        guard now - state.started >= generation else { return }
        state.previous = now - state.started >= generation * 2 ? [:] : state.current
        state.current = [:]
        state.started = now
        if state.previous.isEmpty { isEmpty.store(true, ordering: .relaxed) }
    }
}
