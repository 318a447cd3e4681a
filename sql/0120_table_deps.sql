-- deps: step_slug depends on dep_slug; both are steps of the same flow, added dep first.
create table engine.deps (
  flow_slug text not null,
  dep_slug text not null,
  step_slug text not null,
  constraint deps_are_identified_by_flow_step_and_dep primary key (flow_slug, step_slug, dep_slug),
  constraint dependency_is_a_step_of_the_flow
    foreign key (flow_slug, dep_slug) references engine.steps (flow_slug, step_slug),
  constraint dependent_is_a_step_of_the_flow
    foreign key (flow_slug, step_slug) references engine.steps (flow_slug, step_slug),
  constraint step_never_depends_on_itself check (dep_slug <> step_slug)
);
create index deps_by_dependency on engine.deps (flow_slug, dep_slug);
