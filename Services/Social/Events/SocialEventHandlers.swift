import Foundation
import Logging
import PostgresNIO
import ServiceKit

/// Events from auth: a profile for every account, the verified badge with the creator role, and
/// nothing left of a deleted account.
struct SocialEventHandlers {
    let social: Social

    var handlers: EventHandlers {
        var handlers = EventHandlers()
        let profiles = social.profiles
        // The name the account's maker chose, unless the address's owner has taken the account over
        // since: a registration delivered after the takeover (retried, or taken by the other
        // process) must not bring back the maker's words.
        handlers.on(UserRegistered.self) { event, context in
            let name = try await context.isLatest("identity", of: event.userID, among: "auth") ? event.displayName : nil
            try await profiles.ensure(id: event.userID, displayName: name, verified: false, overwriteVerified: false, on: context.connection, logger: context.logger)
        }
        // Verified as the latest roles say: an older event delivered late changes nothing.
        handlers.on(UserRolesChanged.self) { event, context in
            guard try await context.isLatest("roles", of: event.userID, among: "auth") else { return }
            try await profiles.ensure(id: event.userID, displayName: nil, verified: event.roles.contains(.creator), overwriteVerified: true, on: context.connection, logger: context.logger)
        }
        handlers.on(UserDeleted.self) { event, context in
            try await Self.purge(event.userID, on: context.connection, logger: context.logger)
        }
        // The address's owner proved it for the first time (disowning, or a reset of an account
        // nobody had proven): nothing the account's maker made here stays (follows, blocks, the
        // profile's name, bio and avatar); a blank profile does.
        handlers.on(UserPasswordChanged.self) { event, context in
            guard event.makerDropped else { return }
            _ = try await context.isLatest("identity", of: event.userID, among: "auth")
            try await Self.purge(event.userID, keepingAccount: true, on: context.connection, logger: context.logger)
            try await context.connection.forgetKeptAnswers(of: event.userID, madeBefore: context.envelope.occurredAt, logger: context.logger)
        }
        return handlers
    }

    /// Removes every row that mentions the user, correcting the counts of the people they followed
    /// and who followed them, and remembers (by hash) that the account is gone; `keepingAccount`
    /// leaves a blank profile instead (the account lives on with another owner).
    ///
    /// The profile row is locked first: every follow, request and block takes a key-share lock on both
    /// profiles before it reads them, so none is in flight while this runs and none starts until it
    /// commits (they then find no profile: 404). Counts are corrected from the rows this statement
    /// actually deleted, so a concurrent unfollow cannot be subtracted twice.
    static func purge(_ user: UUID, keepingAccount: Bool = false, on connection: PostgresConnection, logger: Logger) async throws {
        // A profile being made (`ProfileStore.ensure`) holds the account until it commits, and is
        // then found here; one made after finds the tombstone.
        try await connection.holdAccountForDeletion(user, logger: logger)
        // An account deleted before a late `user.password_changed` came: its rows are gone already,
        // and the blank profile the takeover leaves must not bring it back.
        if keepingAccount, try await connection.isDeletedAccount(user, logger: logger) { return }
        try await connection.checkedRun("SELECT 1 FROM profiles WHERE user_id = \(user) FOR UPDATE", logger: logger)
        var followed: [UUID] = []
        for try await id in try await connection.checkedQuery("DELETE FROM follows WHERE follower_id = \(user) RETURNING followee_id", logger: logger).decode(UUID.self) {
            followed.append(id)
        }
        var followers: [UUID] = []
        for try await id in try await connection.checkedQuery("DELETE FROM follows WHERE followee_id = \(user) RETURNING follower_id", logger: logger).decode(UUID.self) {
            followers.append(id)
        }
        try await connection.checkedRun(
            """
            UPDATE profiles SET
                followers_count = followers_count - CASE WHEN user_id = ANY(\(followed)) THEN 1 ELSE 0 END,
                following_count = following_count - CASE WHEN user_id = ANY(\(followers)) THEN 1 ELSE 0 END
            WHERE user_id = ANY(\(followed + followers))
            """, logger: logger)
        // A takeover drops what the maker did, not what others decided about the account: their
        // blocks and mutes of it, a moderator's warnings and hiding stay. Otherwise anyone who never
        // proved their own address could shed them with a password reset by mail (a first proof).
        for statement: PostgresQuery in [
            "DELETE FROM follow_requests WHERE requester_id = \(user) OR target_id = \(user)",
            keepingAccount ? "DELETE FROM blocks WHERE blocker_id = \(user)" : "DELETE FROM blocks WHERE blocker_id = \(user) OR blocked_id = \(user)",
            keepingAccount ? "DELETE FROM mutes WHERE muter_id = \(user)" : "DELETE FROM mutes WHERE muter_id = \(user) OR muted_id = \(user)",
            "DELETE FROM notifications WHERE user_id = \(user) OR actor_id = \(user)",
            "DELETE FROM notification_pushes WHERE user_id = \(user) OR actor_id = \(user)",
            "UPDATE warnings SET moderator_id = NULL WHERE moderator_id = \(user)",
            "DELETE FROM avatars WHERE user_id = \(user)",
        ] {
            try await connection.checkedRun(statement, logger: logger)
        }
        if keepingAccount {
            // Blanked in place: the rows that name it (others' blocks and mutes, warnings) go with
            // a deleted profile. Every column but the id, the times and the moderators' hiding is
            // its default, as a new profile's (a test compares the two).
            try await connection.checkedRun(
                """
                UPDATE profiles SET username = DEFAULT, display_name = DEFAULT, bio = DEFAULT, avatar_etag = DEFAULT, is_verified = DEFAULT,
                    is_private = DEFAULT, dietary_preferences = DEFAULT, allergies = DEFAULT, favorite_cuisines = DEFAULT,
                    cooking_preferences = DEFAULT, dietary_visibility = DEFAULT, onboarding_answered = DEFAULT, onboarding_skipped = DEFAULT,
                    followers_count = DEFAULT, following_count = DEFAULT, updated_at = now()
                WHERE user_id = \(user)
                """, logger: logger)
            try await connection.checkedRun("INSERT INTO profiles (user_id) VALUES (\(user)) ON CONFLICT DO NOTHING", logger: logger)
        } else {
            try await connection.checkedRun("DELETE FROM profiles WHERE user_id = \(user)", logger: logger)
            try await connection.recordDeletedAccount(user, logger: logger)
        }
    }
}
