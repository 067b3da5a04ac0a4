import Foundation
import Hummingbird
import ServiceKit

/// The steps a new user is walked through; a step is done when its data is set.
enum OnboardingStep: String, Codable, Sendable, CaseIterable {
    /// Display name and username.
    case name
    case avatar
    case dietaryPreferences = "dietary_preferences"
    case allergies
    case cuisines

    var isRequired: Bool { self != .avatar && self != .allergies }

    enum State: String, Codable, Sendable {
        case pending, done, skipped
    }

    func state(of profile: ProfileRecord) -> State {
        let done =
            switch self {
            case .name: profile.username != nil && profile.displayName != nil
            case .avatar: profile.avatarETag != nil
            case .dietaryPreferences, .allergies, .cuisines: profile.onboardingAnswered.contains(rawValue)
            }
        if done { return .done }
        return !isRequired && profile.onboardingSkipped.contains(rawValue) ? .skipped : .pending
    }
}

struct OnboardingView: Codable, Sendable {
    struct Step: Codable, Sendable {
        var step: OnboardingStep
        var required: Bool
        var state: OnboardingStep.State
    }

    var steps: [Step]
    /// Every step is done or (when optional) skipped.
    var complete: Bool

    init(_ profile: ProfileRecord) {
        steps = OnboardingStep.allCases.map { Step(step: $0, required: $0.isRequired, state: $0.state(of: profile)) }
        complete = steps.allSatisfy { $0.state != .pending }
    }
}

struct OnboardingRoutes {
    let social: Social

    func add(to router: Router<ServiceRequestContext>) {
        let onboarding = router.group("v1/profiles/me/onboarding", context: AuthenticatedContext.self)
        onboarding.get(use: show)
        onboarding.post(":step/skip", use: skip)
    }

    @Sendable func show(_ request: Request, context: AuthenticatedContext) async throws -> OnboardingView {
        let social = self.social
        return OnboardingView(
            try await social.postgres.withConnectionOnItsLoop { connection in
                try await social.ownProfile(context.caller, on: connection, logger: context.logger)
            })
    }

    @Sendable func skip(_ request: Request, context: AuthenticatedContext) async throws -> OnboardingView {
        guard let step = context.parameters.get("step").flatMap(OnboardingStep.init(rawValue:)) else {
            throw APIError.notFound("No such onboarding step; steps are \(OnboardingStep.allCases.map(\.rawValue).joined(separator: ", ")).")
        }
        guard !step.isRequired else {
            throw APIError.conflict("The \(step.rawValue) step is required and cannot be skipped.", code: "step_required")
        }
        let social = self.social
        let caller = context.caller
        return OnboardingView(
            try await social.transaction(logger: context.logger) { connection in
                _ = try await social.ownProfile(caller, forUpdate: true, on: connection, logger: context.logger)
                try await social.profiles.markSkipped(caller.userID, step: step, on: connection, logger: context.logger)
                return try await social.ownProfile(caller, on: connection, logger: context.logger)
            })
    }
}
