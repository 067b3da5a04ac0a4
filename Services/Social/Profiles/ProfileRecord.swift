import Foundation
import PostgresNIO
import ServiceKit

/// Who may see a profile's dietary data (besides its owner and staff).
enum DietaryVisibility: String, Codable, Sendable, CaseIterable {
    case `public`
    case followersOnly = "followers_only"
    case `private`
}

/// How someone likes to cook; every part is optional.
struct CookingPreferences: Codable, Sendable, Equatable {
    enum SkillLevel: String, Codable, Sendable, CaseIterable {
        case beginner, intermediate, advanced, professional
    }

    var skillLevel: SkillLevel?
    var timeBudgetMinutes: Int?
    var equipment: [String]?

    // In the order of their names (`ProfileView.CodingKeys` says why).
    enum CodingKeys: String, CodingKey {
        case equipment, skillLevel = "skill_level", timeBudgetMinutes = "time_budget_minutes"
    }
}

/// A profile as stored.
struct ProfileRecord: Sendable {
    var id: UUID
    var username: String?
    var displayName: String?
    var bio: String?
    var avatarETag: String?
    var isVerified: Bool
    var isPrivate: Bool
    var hiddenAt: Date?
    var dietaryPreferences: [String]
    var allergies: [Allergy]
    var favoriteCuisines: [String]
    var cookingPreferences: CookingPreferences
    var dietaryVisibility: DietaryVisibility
    var onboardingAnswered: [String]
    var onboardingSkipped: [String]
    var followersCount: Int
    var followingCount: Int
    var createdAt: Date
    var updatedAt: Date

    /// Where clients fetch the avatar; the version in the query changes with the image, so clients
    /// may cache the URL for good.
    var avatarURL: String? { Self.avatarURL(id: id, etag: avatarETag) }

    static func avatarURL(id: UUID, etag: String?) -> String? {
        etag.map { "/v1/profiles/\(id.uuidString.lowercased())/avatar?v=\($0)" }
    }
}

extension ProfileRecord {
    /// The columns of `ProfileStore.columns`, in that order.
    typealias Columns = (UUID, String?, String?, String?, String?, Bool, Bool, Date?, [String], String, [String], String, String, [String], [String], Int32, Int32, Date, Date)

    init(_ row: Columns) throws {
        let (id, username, displayName, bio, etag, verified, isPrivate, hiddenAt, diets, allergies, cuisines, cooking, visibility, answered, skipped, followers, following, created, updated) = row
        // Most profiles have neither; a JSON decoder for `[]` and `{}` was a tenth of a profile read.
        self.init(
            id: id, username: username, displayName: displayName, bio: bio, avatarETag: etag, isVerified: verified, isPrivate: isPrivate,
            hiddenAt: hiddenAt, dietaryPreferences: diets, allergies: allergies == "[]" ? [] : try JSONDecoder().decode([Allergy].self, from: Data(allergies.utf8)),
            favoriteCuisines: cuisines, cookingPreferences: cooking == "{}" ? CookingPreferences() : try JSONDecoder().decode(CookingPreferences.self, from: Data(cooking.utf8)),
            dietaryVisibility: DietaryVisibility(rawValue: visibility) ?? .followersOnly, onboardingAnswered: answered, onboardingSkipped: skipped,
            followersCount: Int(followers), followingCount: Int(following), createdAt: created, updatedAt: updated
        )
    }
}

extension ProfileRecord {
    /// The columns of `ProfileStore.columns` from `cells[0...]`, column by column: `row.decode((…).self)`
    /// decoded each column through unspecialized variadic generics (a thousand instructions for a Bool).
    init(cells: PostgresRandomAccessRow) throws {
        try self.init(
            (
                try cells[0].decode(UUID.self), try cells[1].decode(String?.self), try cells[2].decode(String?.self), try cells[3].decode(String?.self),
                try cells[4].decode(String?.self), try cells[5].decode(Bool.self), try cells[6].decode(Bool.self), try cells[7].decode(Date?.self),
                try cells[8].decode([String].self), try cells[9].decode(String.self), try cells[10].decode([String].self), try cells[11].decode(String.self),
                try cells[12].decode(String.self), try cells[13].decode([String].self), try cells[14].decode([String].self), try cells[15].decode(Int32.self),
                try cells[16].decode(Int32.self), try cells[17].decode(Date.self), try cells[18].decode(Date.self)
            ))
    }
}

/// A profile by its id, prepared once per connection: `GET /v1/profiles/me` and every route that
/// reads the caller's own profile. As an unnamed statement PostgreSQL parsed and planned it on
/// every call, which took it from some 50,000 to 21,000 executions/s (`pgbench -M prepared` against
/// `-M extended`, 16 clients, this machine).
struct ProfileByID: OneParameterStatement {
    static let name = "social.profile_by_id"
    static let sql = "SELECT \(ProfileStore.columns) FROM profiles WHERE user_id = $1"
    static let bindingDataTypes: [PostgresDataType] = [.uuid]
    typealias Row = ProfileRecord

    var id: UUID

    var parameter: UUID { id }

    func decodeRow(_ row: PostgresRow) throws -> ProfileRecord {
        try ProfileRecord(cells: row.makeRandomAccess())
    }
}

/// How the caller stands towards a profile.
struct Relationship: Codable, Sendable, Equatable {
    var following = false
    var followedBy = false
    var requested = false
    var blocking = false
    var blockedBy = false
    var muting = false

    // In the order of their names (`ProfileView.CodingKeys` says why).
    enum CodingKeys: String, CodingKey {
        case blockedBy = "blocked_by", blocking, followedBy = "followed_by", following, muting, requested
    }
}

/// A profile as one caller may see it: fields the caller may not see are left out of the JSON.
/// username, display_name and avatar_url are always present, null when unset (the document
/// requires them); the other optionals, the fields a viewer may not see, are left out when unset.
struct ProfileView: Encodable, Sendable {
    var id: UUID
    @Nullable var username: String?
    @Nullable var displayName: String?
    @Nullable var avatarURL: String?
    var isVerified: Bool
    var isPrivate: Bool
    var followersCount: Int
    var followingCount: Int
    var createdAt: Date
    var bio: String?
    var favoriteCuisines: [String]?
    var cookingPreferences: CookingPreferences?
    var dietaryPreferences: [String]?
    var allergies: [Allergy]?
    var dietaryVisibility: DietaryVisibility?
    var isHidden: Bool?
    var updatedAt: Date?
    var relationship: Relationship?

    // In the order of their names; the JSON's keys are sorted either way.
    enum CodingKeys: String, CodingKey, CaseIterable {
        case allergies, avatarURL = "avatar_url", bio, cookingPreferences = "cooking_preferences", createdAt = "created_at"
        case dietaryPreferences = "dietary_preferences", dietaryVisibility = "dietary_visibility", displayName = "display_name"
        case favoriteCuisines = "favorite_cuisines", followersCount = "followers_count", followingCount = "following_count"
        case id, isHidden = "is_hidden", isPrivate = "is_private", isVerified = "is_verified", relationship, updatedAt = "updated_at", username
    }

    /// The privacy rules in one place. The owner and staff see everything; a private profile shows
    /// its details only to accepted followers; dietary data also follows `dietary_visibility`.
    init(_ profile: ProfileRecord, relationship: Relationship?, isOwner: Bool, isStaff: Bool) {
        id = profile.id
        username = profile.username
        displayName = profile.displayName
        avatarURL = profile.avatarURL
        isVerified = profile.isVerified
        isPrivate = profile.isPrivate
        followersCount = profile.followersCount
        followingCount = profile.followingCount
        createdAt = profile.createdAt
        self.relationship = isOwner ? nil : relationship
        let following = relationship?.following ?? false
        let seesEverything = isOwner || isStaff
        let seesDetails = seesEverything || !profile.isPrivate || following
        let seesDiet = seesEverything || (seesDetails && (profile.dietaryVisibility == .public || (profile.dietaryVisibility == .followersOnly && following)))
        if seesDetails {
            bio = profile.bio
            favoriteCuisines = profile.favoriteCuisines
            cookingPreferences = profile.cookingPreferences
        }
        if seesDiet {
            dietaryPreferences = profile.dietaryPreferences
            allergies = profile.allergies
        }
        if seesEverything {
            dietaryVisibility = profile.dietaryVisibility
            isHidden = profile.hiddenAt != nil
            updatedAt = profile.updatedAt
        }
    }

    /// Whether the caller may list this profile's followers and following.
    static func listsVisible(_ profile: ProfileRecord, relationship: Relationship, isOwner: Bool, isStaff: Bool) -> Bool {
        isOwner || isStaff || !profile.isPrivate || relationship.following
    }
}

/// A profile in a list: just enough to show a row.
/// Every field, null when unset: the document requires them all.
struct ProfileSummary: Codable, Sendable {
    var id: UUID
    @Nullable var username: String?
    @Nullable var displayName: String?
    @Nullable var avatarURL: String?
    var isVerified: Bool

    // In the order of their names (`ProfileView.CodingKeys` says why).
    enum CodingKeys: String, CodingKey {
        case avatarURL = "avatar_url", displayName = "display_name", id, isVerified = "is_verified", username
    }

    static let columns = "p.user_id, p.username, p.display_name, p.avatar_etag, p.is_verified"
    typealias Columns = (UUID, String?, String?, String?, Bool)

    init(_ row: Columns) {
        let (id, username, displayName, etag, verified) = row
        self.id = id
        self.username = username
        self.displayName = displayName
        self.avatarURL = ProfileRecord.avatarURL(id: id, etag: etag)
        self.isVerified = verified
    }
}
