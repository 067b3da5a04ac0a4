import Foundation
import ServiceKit
import Synchronization

/// Sessions that ended (a sign-out, a takeover, a password reset) and accounts deleted, as this
/// process heard them on the live subscription (`LiveHub`): a request bearing a token of one is
/// refused at the edge (`401 session_revoked`) rather than passed on to a service, which would take
/// the token until it expires. Kept longer than any access token lives (`ACCESS_TOKEN_TTL_SECONDS`
/// is at most 900), by user; at most `capacity` users, the longest unchanged forgotten first.
final class EndedSessions: Sendable {
    static let kept: Duration = .seconds(20 * 60)
    private let capacity: Int
    private let state = Mutex(State())
    /// Read without the lock on every request: nothing ended here yet, nothing to look up.
    private let isEmpty = Atomic<Bool>(true)

    private struct State {
        var endings: [UUID: (ending: LiveEnding, heard: ContinuousClock.Instant)] = [:]
        var swept = ContinuousClock.now
    }

    init(capacity: Int = 200_000) {
        self.capacity = capacity
    }

    /// Adds what a live entry of `user` ended to what was heard of them before. A session that ended
    /// never starts again, nor does a deleted account, so what is merged is never taken back.
    func record(_ ending: LiveEnding, of user: UUID, now: ContinuousClock.Instant = .now) {
        state.withLock { state in
            if now - state.swept > .seconds(60) || state.endings.count >= capacity {
                state.endings = state.endings.filter { now - $0.value.heard < Self.kept }
                if state.endings.count >= capacity, let oldest = state.endings.min(by: { $0.value.heard < $1.value.heard }) {
                    state.endings[oldest.key] = nil
                }
                state.swept = now
            }
            var merged = state.endings[user]?.ending ?? LiveEnding(sessionIDs: [], everyStream: false, sessionless: false)
            merged.sessionIDs.formUnion(ending.sessionIDs)
            merged.everyStream = merged.everyStream || ending.everyStream
            merged.sessionless = merged.sessionless || ending.sessionless
            state.endings[user] = (merged, now)
        }
        isEmpty.store(false, ordering: .relaxed)
    }

    /// Whether a token of `user` and `session` is one whose session ended, or whose account is gone.
    func ended(user: UUID, session: UUID?, now: ContinuousClock.Instant = .now) -> Bool {
        guard !isEmpty.load(ordering: .relaxed) else { return false }
        return state.withLock { state in
            guard let (ending, heard) = state.endings[user], now - heard < Self.kept else { return false }
            return ending.ends(session: session)
        }
    }

    /// Whether the bearer token of `authorization` is one whose session ended here: read from this
    /// process's verified tokens when it is among them, otherwise from its payload unverified, which
    /// is enough to refuse it (a forged token naming an ended session is refused too, as it would be
    /// anyway). Nothing is read while nothing has ended.
    func endsToken(of authorization: String, verifier: TokenVerifier, now: Date = Date()) -> Bool {
        guard !isEmpty.load(ordering: .relaxed), let token = TokenMiddleware<ServiceRequestContext>.bearerToken(authorization) else { return false }
        if let caller = verifier.cachedCaller(token, now: now) { return ended(user: caller.userID, session: caller.sessionID) }
        guard let (user, session) = JWTHeaderPeek.subject(of: token) else { return false }
        return ended(user: user, session: session)
    }

    static let refusal = APIError.unauthorized("This session has ended; sign in again.", code: "session_revoked")
}
