import Foundation
import Models
@testable import ServiceKitEvents
import Testing
import TestSupport

/// The event contracts (docs/EVENTS.md): every type the code publishes has a JSON Schema of each of
/// its versions and a fixture of each shape it has had; what a publisher writes is valid against
/// its newest schema and names no field the schema does not; every fixture is valid and reads.
@Suite struct EventContractTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let schemas = repository.appendingPathComponent("Shared/Models/Events/schemas")

    static func schema(_ type: String, version: Int, strict: Bool = false) throws -> JSONSchemaCheck {
        try JSONSchemaCheck(file: schemas.appendingPathComponent("\(type).v\(version).json"), strict: strict)
    }

    static func object(_ json: String) throws -> [String: Any] {
        try #require(try JSONSerialization.jsonObject(with: Data(json.utf8)) as? [String: Any])
    }

    /// Every `eventType` declared in the code, found in the sources: a payload added without a
    /// place in `EventCatalog` (and so without a schema) fails here.
    @Test func theCatalogueNamesEveryEventTypeTheCodeDeclares() throws {
        var declared: Set<String> = []
        for folder in ["Shared", "Services"] {
            let root = Self.repository.appendingPathComponent(folder)
            let files = FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil)!.compactMap { $0 as? URL }.filter { $0.pathExtension == "swift" }
            for file in files {
                let text = try String(contentsOf: file, encoding: .utf8)
                for match in text.matches(of: /static (?:let|var) eventType(?:: String)? = "([^"]+)"/) { declared.insert(String(match.1)) }
            }
        }
        #expect(declared.count >= 24)
        #expect(declared == Set(EventCatalog.versions.keys), "declared but not in EventCatalog: \(declared.subtracting(EventCatalog.versions.keys).sorted())")
    }

    @Test func everyTypeHasASchemaOfEachVersionAndAFixtureOfEachVersion() throws {
        let fixtures = try EventFixture.all()
        for (type, newest) in EventCatalog.versions {
            for version in 1...newest {
                let file = Self.schemas.appendingPathComponent("\(type).v\(version).json")
                #expect(FileManager.default.fileExists(atPath: file.path), "\(type) has no schema of version \(version): \(file.lastPathComponent)")
                #expect(fixtures.contains { $0.type == type && $0.version == version }, "\(type) has no fixture of version \(version)")
            }
        }
        // No schema or fixture of a type (or a version) the code does not know.
        let files = try FileManager.default.contentsOfDirectory(atPath: Self.schemas.path).filter { $0 != "envelope.json" }
        for file in files {
            let match = try #require(file.wholeMatch(of: /(.+)\.v([0-9]+)\.json/), "\(file) is not named <type>.v<version>.json")
            #expect((EventCatalog.versions[String(match.1)] ?? 0) >= Int(match.2)!, "\(file) is of no type or version the code knows")
        }
        for fixture in fixtures {
            #expect((EventCatalog.versions[fixture.type] ?? 0) >= fixture.version, "\(fixture.name) is of no type or version the code knows")
            #expect(fixture.name.hasPrefix("\(fixture.type).v\(fixture.version)"), "\(fixture.name) is not named for its type and version")
        }
    }

    /// Each fixture is valid against the envelope's schema and its version's, and this release reads
    /// it as the payload type its consumers register.
    @Test func everyFixtureIsValidAndReads() throws {
        let envelope = try JSONSchemaCheck(file: Self.schemas.appendingPathComponent("envelope.json"))
        for fixture in try EventFixture.all() {
            let object = try Self.object(fixture.text)
            #expect(envelope.problems(object).isEmpty, "\(fixture.name): \(envelope.problems(object))")
            let data = try Self.schema(fixture.type, version: fixture.version).problems(object["data"] as Any)
            #expect(data.isEmpty, "\(fixture.name): \(data)")
            let read = try EventEnvelope(json: fixture.text)
            let payload = try #require(EventCatalog.payloads.first { $0.eventType == fixture.type })
            #expect(throws: Never.self, "\(fixture.name) does not decode as \(payload)") { try Self.decode(payload, read) }
        }
    }

    static func decode<Payload: EventPayload>(_: Payload.Type, _ envelope: EventEnvelope) throws {
        _ = try envelope.decode(Payload.self)
    }

    /// One event of every type with every field set, made as its publisher makes it
    /// (`EventOutbox.write`: the payload in an `EventEnvelope`), then numbered as the relay does.
    static let published: [any EventPayload] = {
        let (a, b, c, d) = (UUID(), UUID(), UUID(), UUID())
        let upgrade = LimitUpgrade(tier: "pro", name: "Pro")
        return [
            UserRegistered(userID: a, email: "kim@example.com", displayName: "Kim", provider: "email"),
            UserSignedIn(userID: a, sessionID: b, provider: "password"),
            UserEmailVerified(userID: a, email: "kim@example.com", vouchedBy: "apple"),
            UserRolesChanged(userID: a, roles: [.user, .coach], added: [.coach], removed: [.client]),
            UserDeleted(userID: a),
            UserPasswordChanged(userID: a, method: .disowned, makerDropped: true),
            UserStatusChanged(userID: a, disabled: true),
            SessionsEnded(userID: a, sessionIDs: [b, c], all: false),
            ProfileUpdated(
                userID: a, dietaryPreferences: ["keto"], allergies: [Allergy(name: "peanuts", severity: .lifeThreatening)], displayName: "Kim",
                avatarURL: "/v1/profiles/\(a.uuidString.lowercased())/avatar?v=2"),
            FollowCreated(followerID: a, followeeID: b),
            FollowRequested(requesterID: a, targetID: b),
            FollowRemoved(followerID: a, followeeID: b, reason: .block),
            BlockCreated(blockerID: a, blockedID: b),
            BlockRemoved(blockerID: a, blockedID: b),
            NotificationCreated(notificationID: c, userID: b, kind: .followAccepted, actorID: a),
            InvitationAccepted(invitationID: c, coachID: a, clientID: b, rosterEntryID: d),
            ClientInvited(rosterEntryID: d, coachID: a),
            ClientRemoved(rosterEntryID: d, coachID: a),
            ClientUnlinked(coachID: a, clientID: b, reason: .coachDeleted, hasOtherCoach: true, rosterEntryID: d),
            EntitlementChanged(
                userID: a, tier: "pro", state: "active", features: ["ai_suggestions": true], limits: ["meal_photo_analyses": 100, "sources": nil],
                limitUpgrades: ["meal_photo_analyses": upgrade]),
            EntitlementCatalogChanged(defaultTier: "free", features: ["ai_suggestions": false], limits: ["sources": 50], limitUpgrades: ["sources": upgrade]),
            WorkoutAssigned(coachID: a, clientID: b, workoutID: c, sessionIDs: [d], dates: ["2026-12-01"]),
            WorkoutLogged(sessionID: d, coachID: a, clientID: b, status: "partial"),
            WorkoutCommented(sessionID: d, commentID: c, authorID: b, authorRole: "client", text: "Felt \"heavy\" / slow."),
        ]
    }()

    static func envelope(of payload: some EventPayload) throws -> String {
        EventEnvelope.stamping(try EventEnvelope(payload, producer: "auth", userID: UUID()).json, sequence: 42)
    }

    @Test func whatEachPublisherWritesIsValidAgainstItsNewestSchemaAndHasAFixture() throws {
        #expect(Set(Self.published.map { type(of: $0).eventType }) == Set(EventCatalog.versions.keys), "a type without a published sample here")
        let envelope = try JSONSchemaCheck(file: Self.schemas.appendingPathComponent("envelope.json"), strict: true)
        let fixtures = try EventFixture.all()
        for payload in Self.published {
            let name = type(of: payload).eventType
            let newest = type(of: payload).version
            let object = try Self.object(try Self.envelope(of: payload))
            #expect(envelope.problems(object).isEmpty, "\(name): \(envelope.problems(object))")
            let data = try #require(object["data"] as? [String: Any])
            let problems = try Self.schema(name, version: newest, strict: true).problems(data)
            #expect(problems.isEmpty, "\(name) as published is not valid against \(name).v\(newest).json: \(problems)")
            // A field added to a type comes with a fixture of the shape that has it.
            let shown = fixtures.filter { $0.type == name && $0.version == newest }.reduce(into: Set<String>()) { keys, fixture in
                keys.formUnion(((try? Self.object(fixture.text))?["data"] as? [String: Any] ?? [:]).keys)
            }
            #expect(Set(data.keys).isSubset(of: shown), "\(name) writes \(Set(data.keys).subtracting(shown).sorted()), which no fixture of version \(newest) has")
        }
    }

    /// A schema that is wrong about a publisher is caught: the check is not one that passes anything.
    @Test func theSchemaCheckRefusesWhatItShould() throws {
        let schema = try Self.schema("invitation.accepted", version: 1, strict: true)
        let good: [String: Any] = ["invitation_id": "6de81eae-51ea-4b58-adbb-31d983e88bf0", "coach_id": "6de81eae-51ea-4b58-adbb-31d983e88bf1", "client_id": "6de81eae-51ea-4b58-adbb-31d983e88bf2"]
        #expect(schema.problems(good).isEmpty)
        #expect(!schema.problems(good.merging(["roster_entry_id": "6DE81EAE-51EA-4B58-ADBB-31D983E88BF0"]) { $1 }).isEmpty, "an uppercase id")
        #expect(!schema.problems(good.merging(["surprise": 1]) { $1 }).isEmpty, "a field the schema does not name")
        #expect(!schema.problems(good.filter { $0.key != "client_id" }).isEmpty, "a missing field")
        let roles = try Self.schema("user.roles_changed", version: 1)
        #expect(!roles.problems(["user_id": "6de81eae-51ea-4b58-adbb-31d983e88bf0", "roles": ["chef"], "added": [], "removed": []]).isEmpty, "a role no reader knows")
        let status = try Self.schema("user.status_changed", version: 1)
        #expect(!status.problems(["user_id": "6de81eae-51ea-4b58-adbb-31d983e88bf0", "disabled": 1]).isEmpty, "a number for a boolean")
        #expect(status.problems(["user_id": "6de81eae-51ea-4b58-adbb-31d983e88bf0", "disabled": true]).isEmpty)
    }

    /// What a consumer does with what it meets: its types in the versions it knows go to its
    /// handler; a type this release knows but the service does not read is skipped quietly; a type
    /// or a version this release does not know is left alone and counted.
    @Test func aConsumerLeavesAloneTypesAndVersionsItDoesNotKnow() throws {
        var handlers = EventHandlers()
        handlers.on(UserRegistered.self) { _, _ in }
        func lookup(_ type: String, _ version: Int?) throws -> String {
            var object: [String: Any] = [
                "id": UUID().uuidString.lowercased(), "type": type, "occurred_at": "2026-11-28T12:00:00Z", "producer": "auth", "data": [:] as [String: Any],
            ]
            if let version { object["version"] = version }
            let json = String(decoding: try JSONSerialization.data(withJSONObject: object), as: UTF8.self)
            switch handlers.lookup(try EventEnvelope(json: json)) {
            case .handle: return "handle"
            case .notConsumed: return "skip"
            case .ignored(let reason): return reason
            }
        }
        #expect(try lookup("user.registered", 1) == "handle")
        // An envelope without a version is of the first.
        #expect(try lookup("user.registered", nil) == "handle")
        #expect(try lookup("user.registered", 2) == "unknown_version")
        #expect(try lookup("user.registered", 0) == "unknown_version")
        #expect(try lookup("user.deleted", 1) == "skip")
        #expect(try lookup("user.reshaped", 1) == "unknown_type")
    }
}
