import Foundation
import Logging
import Models
import PostgresNIO
import ServiceKit

/// Events from auth: a profile for every account, the verified badge with the creator role, and
/// nothing left of a deleted account.
struct SocialEventHandlers {
    let social: Social

    var handlers: EventHandlers {
        var handlers = EventHandlers()
        let profiles = social.profiles
        handlers.on(UserRegistered.self) { event, context in
            try await profiles.ensure(id: event.userID, displayName: event.displayName, verified: nil, on: context.connection, logger: context.logger)
        }
        handlers.on(UserRolesChanged.self) { event, context in
            try await profiles.ensure(id: event.userID, displayName: nil, verified: event.roles.contains(.creator), on: context.connection, logger: context.logger)
        }
        handlers.on(UserDeleted.self) { event, context in
            try await Self.purge(event.userID, on: context.connection, logger: context.logger)
        }
        return handlers
    }

    /// Removes every row that mentions the user, correcting the counts of the people they followed
    /// and who followed them, and remembers (by hash) that the account is gone.
    static func purge(_ user: UUID, on connection: PostgresConnection, logger: Logger) async throws {
        try await connection.query("""
            UPDATE profiles p SET followers_count = p.followers_count - 1
            FROM follows f WHERE f.follower_id = \(user) AND p.user_id = f.followee_id
            """, logger: logger)
        try await connection.query("""
            UPDATE profiles p SET following_count = p.following_count - 1
            FROM follows f WHERE f.followee_id = \(user) AND p.user_id = f.follower_id
            """, logger: logger)
        for statement: PostgresQuery in [
            "DELETE FROM follows WHERE follower_id = \(user) OR followee_id = \(user)",
            "DELETE FROM follow_requests WHERE requester_id = \(user) OR target_id = \(user)",
            "DELETE FROM blocks WHERE blocker_id = \(user) OR blocked_id = \(user)",
            "DELETE FROM mutes WHERE muter_id = \(user) OR muted_id = \(user)",
            "DELETE FROM notifications WHERE user_id = \(user) OR actor_id = \(user)",
            "UPDATE warnings SET moderator_id = NULL WHERE moderator_id = \(user)",
            "DELETE FROM warnings WHERE user_id = \(user)",
            "DELETE FROM avatars WHERE user_id = \(user)",
            "DELETE FROM profiles WHERE user_id = \(user)",
            "INSERT INTO deleted_accounts (user_hash) VALUES (sha256(convert_to(\(user.uuidString.lowercased()), 'UTF8'))) ON CONFLICT DO NOTHING",
        ] {
            try await connection.query(statement, logger: logger)
        }
    }
}
