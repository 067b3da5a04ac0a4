import Foundation
import ServiceKit

/// A checked `PATCH /v1/profiles/me` body: only the fields that were sent. Every problem in the body
/// is reported at once, each with its field.
struct ProfileEdit: Sendable {
    var username: String?
    /// `.some(nil)` clears the field.
    var displayName: String??
    var bio: String??
    var isPrivate: Bool?
    var dietaryPreferences: [String]?
    var allergies: [Allergy]?
    var favoriteCuisines: [String]?
    var cookingPreferences: CookingPreferences?
    var dietaryVisibility: DietaryVisibility?

    static let dietaryOptions: [String] = [
        "vegetarian", "vegan", "pescatarian", "keto", "paleo", "gluten_free", "dairy_free", "low_carb", "halal", "kosher",
        "nut_free", "low_fodmap", "mediterranean", "whole30", "low_sodium", "diabetic_friendly",
    ]
    /// Names that would impersonate the service or collide with routes.
    static let reservedUsernames: Set<String> = [
        "admin", "administrator", "root", "support", "help", "api", "www", "me", "settings", "moderator", "moderators", "mod", "mods",
        "staff", "system", "null", "undefined", "official", "security", "login", "logout", "signup", "auth", "profiles", "profile",
        "search", "notifications", "blocks", "mutes", "follow", "followers", "following", "team", "about", "privacy", "terms", "app",
    ]
    static let fields = ["username", "display_name", "bio", "is_private", "dietary_preferences", "allergies", "favorite_cuisines", "cooking_preferences", "dietary_visibility"]

    var changesDiet: Bool { dietaryPreferences != nil || allergies != nil }
    var isEmpty: Bool {
        username == nil && displayName == nil && bio == nil && isPrivate == nil && dietaryPreferences == nil && allergies == nil
            && favoriteCuisines == nil && cookingPreferences == nil && dietaryVisibility == nil
    }

    init(_ body: JSONValue) throws {
        guard case .object(let object) = body else {
            throw APIError.badRequest("Send a JSON object with the fields to change.", code: "malformed_json")
        }
        var problems: [Problem.FieldError] = []
        func fail(_ field: String, _ message: String) { problems.append(.init(field: field, message: message)) }
        for key in object.keys.sorted() where !Self.fields.contains(key) {
            fail(key, key == "avatar_url" ? "is set by uploading an image to PUT /v1/profiles/me/avatar" : "is not a profile field you can change")
        }
        if let value = object["username"] {
            if case .string(let text) = value {
                if let message = Self.usernameProblem(text) { fail("username", message) } else { username = text }
            } else {
                fail("username", "must be a string")
            }
        }
        if let value = object["display_name"] {
            displayName = Self.optionalText(value, field: "display_name", max: 50, fail: fail)
        }
        if let value = object["bio"] {
            bio = Self.optionalText(value, field: "bio", max: 300, allowNewlines: true, fail: fail)
        }
        if let value = object["is_private"] {
            if case .bool(let flag) = value { isPrivate = flag } else { fail("is_private", "must be true or false") }
        }
        if let value = object["dietary_visibility"] {
            if case .string(let text) = value, let visibility = DietaryVisibility(rawValue: text) {
                dietaryVisibility = visibility
            } else {
                fail("dietary_visibility", "must be one of public, followers_only, private")
            }
        }
        if let value = object["dietary_preferences"] {
            if let list = Self.strings(value, field: "dietary_preferences", maxCount: Self.dietaryOptions.count, maxLength: 40, fail: fail) {
                let unknown = list.filter { !Self.dietaryOptions.contains($0) }
                if unknown.isEmpty {
                    dietaryPreferences = Self.dietaryOptions.filter(list.contains)
                } else {
                    fail("dietary_preferences", "unknown \(unknown.joined(separator: ", ")); choose from \(Self.dietaryOptions.joined(separator: ", "))")
                }
            }
        }
        if let value = object["favorite_cuisines"] {
            favoriteCuisines = Self.strings(value, field: "favorite_cuisines", maxCount: 20, maxLength: 40, fail: fail)
        }
        if let value = object["allergies"] {
            allergies = Self.allergies(value, fail: fail)
        }
        if let value = object["cooking_preferences"] {
            cookingPreferences = Self.cooking(value, fail: fail)
        }
        guard problems.isEmpty else { throw APIError.validation(problems) }
        guard !isEmpty else {
            throw APIError.validation([.init(field: "body", message: "names no field to change; fields are \(Self.fields.joined(separator: ", "))")])
        }
    }

    /// Control and invisible format characters have no place in names (`hasInvisibleCharacters`).
    static func hasControlCharacters(_ text: String) -> Bool {
        text.hasInvisibleCharacters()
    }

    /// Why a username is refused, or nil: 3–30 letters, digits, `_` and `.`, no leading, trailing or
    /// double dot, not reserved.
    static func usernameProblem(_ name: String) -> String? {
        let allowed = name.utf8.allSatisfy { byte in
            (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x30 && byte <= 0x39) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ".")
        }
        guard allowed else { return "may contain only letters, digits, _ and ." }
        guard (3...30).contains(name.utf8.count) else { return "must be 3 to 30 characters long" }
        guard !name.hasPrefix("."), !name.hasSuffix("."), !name.contains("..") else { return "may not start or end with a dot or have two dots in a row" }
        guard !reservedSkeletons.contains(usernameSkeleton(name)) else { return "is reserved" }
        return nil
    }

    /// What a username looks like: lowercase, with I, l, 1 and i as one letter and O and 0 as another.
    /// Two names with one skeleton cannot both exist (the `username_skeleton` index, the same function
    /// in SQL), and a reserved name cannot be spelled around ("adm1n").
    static func usernameSkeleton(_ name: String) -> String {
        String(
            name.lowercased().map { character -> Character in
                switch character {
                case "1", "i": "l"
                case "0": "o"
                default: character
                }
            })
    }

    static let reservedSkeletons = Set(reservedUsernames.map(usernameSkeleton))

    private static func optionalText(_ value: JSONValue, field: String, max: Int, allowNewlines: Bool = false, fail: (String, String) -> Void) -> String?? {
        switch value {
        case .null: return .some(nil)
        case .string(let raw):
            let text = raw.trimmingCharacters(in: .whitespacesAndNewlines)
            if text.codePoints > max { fail(field, "must be at most \(max) characters"); return nil }
            if text.hasInvisibleCharacters(allowing: allowNewlines ? ["\n"] : []) {
                fail(field, "must not contain control characters or invisible formatting characters"); return nil
            }
            return .some(text.isEmpty ? nil : text)
        default: fail(field, "must be a string or null"); return nil
        }
    }

    /// A list of short, distinct (case-insensitively), trimmed strings.
    private static func strings(_ value: JSONValue, field: String, maxCount: Int, maxLength: Int, fail: (String, String) -> Void) -> [String]? {
        guard case .array(let items) = value else { fail(field, "must be an array of strings"); return nil }
        guard items.count <= maxCount else { fail(field, "must have at most \(maxCount) entries"); return nil }
        var result: [String] = []
        var seen: Set<String> = []
        for (index, item) in items.enumerated() {
            guard case .string(let raw) = item else { fail("\(field)[\(index)]", "must be a string"); return nil }
            let text = raw.trimmingCharacters(in: .whitespacesAndNewlines)
            guard (1...maxLength).contains(text.codePoints) else { fail("\(field)[\(index)]", "must be 1 to \(maxLength) characters"); return nil }
            guard !hasControlCharacters(text) else { fail("\(field)[\(index)]", "must not contain control characters or invisible formatting characters"); return nil }
            if seen.insert(text.lowercased()).inserted { result.append(text) }
        }
        return result
    }

    private static func allergies(_ value: JSONValue, fail: (String, String) -> Void) -> [Allergy]? {
        guard case .array(let items) = value else { fail("allergies", "must be an array of {name, severity}"); return nil }
        guard items.count <= 30 else { fail("allergies", "must have at most 30 entries"); return nil }
        var result: [Allergy] = []
        var seen: Set<String> = []
        for (index, item) in items.enumerated() {
            let field = "allergies[\(index)]"
            guard case .object(let object) = item else { fail(field, "must be an object {name, severity}"); return nil }
            if let extra = object.keys.sorted().first(where: { $0 != "name" && $0 != "severity" }) { fail("\(field).\(extra)", "is not an allergy field"); return nil }
            guard case .string(let rawName)? = object["name"] else { fail("\(field).name", "is required and must be a string"); return nil }
            let name = rawName.trimmingCharacters(in: .whitespacesAndNewlines)
            guard (1...50).contains(name.codePoints), !hasControlCharacters(name) else { fail("\(field).name", "must be 1 to 50 characters, without control characters"); return nil }
            guard case .string(let rawSeverity)? = object["severity"], let severity = Allergy.Severity(rawValue: rawSeverity) else {
                fail("\(field).severity", "must be one of \(Allergy.Severity.allCases.map(\.rawValue).joined(separator: ", "))"); return nil
            }
            guard seen.insert(name.lowercased()).inserted else { fail("\(field).name", "is listed twice"); return nil }
            result.append(Allergy(name: name, severity: severity))
        }
        return result
    }

    private static func cooking(_ value: JSONValue, fail: (String, String) -> Void) -> CookingPreferences? {
        guard case .object(let object) = value else { fail("cooking_preferences", "must be an object"); return nil }
        var preferences = CookingPreferences()
        var ok = true
        for key in object.keys.sorted() where !["skill_level", "time_budget_minutes", "equipment"].contains(key) {
            fail("cooking_preferences.\(key)", "is not a cooking preference; use skill_level, time_budget_minutes, equipment"); ok = false
        }
        switch object["skill_level"] {
        case nil, .null?: break
        case .string(let text)? where CookingPreferences.SkillLevel(rawValue: text) != nil: preferences.skillLevel = CookingPreferences.SkillLevel(rawValue: text)
        default: fail("cooking_preferences.skill_level", "must be one of \(CookingPreferences.SkillLevel.allCases.map(\.rawValue).joined(separator: ", "))"); ok = false
        }
        switch object["time_budget_minutes"] {
        case nil, .null?: break
        case .number(let minutes)? where minutes.rounded() == minutes && (5...600).contains(minutes): preferences.timeBudgetMinutes = Int(minutes)
        default: fail("cooking_preferences.time_budget_minutes", "must be a whole number of minutes from 5 to 600"); ok = false
        }
        if let equipment = object["equipment"], equipment != .null {
            if let list = strings(equipment, field: "cooking_preferences.equipment", maxCount: 30, maxLength: 40, fail: fail) { preferences.equipment = list } else { ok = false }
        }
        return ok ? preferences : nil
    }
}
