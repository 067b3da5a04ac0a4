import Foundation

/// The journeys, in order; each is an app's real flow through the client only. The closing line is
/// the plain "N passed, N failed" the runner reads.
let journeys: [(String, () async throws -> Void)] = [
    ("the public documents decode", thePublicDocumentsDecode),
    ("a new user verifies, edits the profile and reads it", aNewUserVerifiesEditsTheProfileAndReadsIt),
    ("the mail's pages confirm the address and reset the password", theMailsPagesConfirmTheAddressAndResetThePassword),
    ("provider sign-in asks for a nonce and refuses a foreign token", providerSignInAsksForANonceAndRefusesAForeignToken),
    ("a follow is heard on the live stream", aFollowIsHeardOnTheLiveStream),
    ("a coach invites and the client accepts", aCoachInvitesAndTheClientAccepts),
    ("a meal is posted, eaten and seen in trends", aMealIsPostedEatenAndSeenInTrends),
    ("a coach plans workouts and the client logs them", aCoachPlansWorkoutsAndTheClientLogsThem),
    ("a free user upgrades and passes", aFreeUserUpgradesAndPasses),
    ("a space needs Team until an admin grants it", aSpaceNeedsTeamUntilAnAdminGrantsIt),
    ("an admin moderates a user", anAdminModeratesAUser),
    ("an account is deleted from the app", anAccountIsDeletedFromTheApp),
]

let only = CommandLine.arguments.dropFirst().first
var passed = 0
var failed = 0
for (name, journey) in journeys where only == nil || name.contains(only!) {
    let started = Date()
    do {
        try await journey()
        passed += 1
        print("ok    \(name) (\(String(format: "%.1f", Date().timeIntervalSince(started))) s)")
    } catch {
        failed += 1
        print("FAIL  \(name): \(error)" + (calledOperations.lastAnswered.map { " (after \($0))" } ?? ""))
    }
}
if let path = Environment.coverageFile {
    try calledOperations.all.joined(separator: "\n").write(toFile: path, atomically: true, encoding: .utf8)
}
print("journeys: \(passed) passed, \(failed) failed")
exit(failed == 0 ? 0 : 1)
