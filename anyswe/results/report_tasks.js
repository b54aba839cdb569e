// anyswe report: draws the task table from its rows (a page at a time), a task's detail when it is
// first opened, and follows #task=KEY&step=N. Run text is only ever set as textContent, never as HTML.
(function(){
  var data=JSON.parse(document.getElementById('task-data').textContent);
  // A large report keeps its tasks in script files beside the page, loaded as a task is opened
  // (a script element: it loads from disk, where fetch() may not).
  var where=document.getElementById('task-chunks'), waiting={};
  where=where?JSON.parse(where.textContent):null;
  window.anysweTasks=function(part){
    Object.keys(part).forEach(function(k){data[k]=part[k]; (waiting[k]||[]).forEach(function(f){f();}); delete waiting[k];});
  };
  function withTask(key,f){
    if(data[key]){f(); return;}
    if(!where||where.of[key]==null)return;
    (waiting[key]=waiting[key]||[]).push(f);
    var id='chunk-'+where.of[key];
    if(!document.getElementById(id)){var s=document.createElement('script'); s.id=id; s.src=where.dir+'/tasks-'+where.of[key]+'.js'; document.head.appendChild(s);}
  }
  function el(tag,cls,text){var e=document.createElement(tag); if(cls)e.className=cls; if(text!=null)e.textContent=text; return e;}
  function fold(text,limit){
    if(text.length<=limit) return el('pre',null,text);
    var d=el('details','long'); d.appendChild(el('summary',null,text.slice(0,120).replace(/\s+/g,' ')+' … ('+text.length+' characters)'));
    d.appendChild(el('pre',null,text)); return d;
  }
  function calls(list){var box=el('div','calls'); list.forEach(function(c){box.appendChild(el('code','call',c[0]+'('+c[1]+')'));}); return box;}
  function phases(list){
    var total=list.reduce(function(a,p){return a+p[1];},0)||1, bar=el('div','bar');
    list.forEach(function(p,i){var s=el('span','ph ph'+i,p[1]>=total*0.08?p[0]:''); s.style.width=(100*p[1]/total)+'%';
      s.title=p[0]+': '+p[1].toFixed(2)+' s'; bar.appendChild(s);});
    return bar;
  }
  function patch(text){
    var pre=el('pre','diff');
    text.split('\n').forEach(function(line){
      var c=line.startsWith('+++')||line.startsWith('---')?'file':line.startsWith('+')?'add':line.startsWith('-')?'del':line.startsWith('@@')?'hunk':null;
      pre.appendChild(el('span',c,line+'\n'));});
    return pre;
  }
  function tests(status){
    var t=el('table','tests'), head=el('tr'); ['tests','passed','failed','failing'].forEach(function(h){head.appendChild(el('th',null,h));}); t.appendChild(head);
    Object.keys(status).forEach(function(kind){var s=status[kind]||{}, r=el('tr'), ok=(s.success||[]), no=(s.failure||[]);
      r.appendChild(el('td',null,kind)); r.appendChild(el('td','num',String(ok.length))); r.appendChild(el('td','num',String(no.length)));
      r.appendChild(el('td',no.length?'no':null,no.join('\n'))); t.appendChild(r);});
    return t;
  }
  function step(s,i){
    var d=el('details','step'); d.dataset.step=i;
    var head=s.refused?('refused: '+s.refused):((s.calls.length?s.calls.map(function(c){return c[0];}).join(', '):'text')+
      ' · '+s.in+' in / '+s.out+' out'+(s.s!=null?' · '+s.s.toFixed(2)+' s':'')+(s.cost!=null?' · $'+s.cost.toFixed(4):''));
    d.appendChild(el('summary',null,'step '+(i+1)+' · '+head));
    s.messages.forEach(function(m){var box=el('div','msg '+m[0]); box.appendChild(el('b',null,m[0]));
      if(m[1])box.appendChild(fold(m[1],600)); if(m[2].length)box.appendChild(calls(m[2])); d.appendChild(box);});
    if(!s.refused){var r=el('div','msg reply'); r.appendChild(el('b',null,'reply ('+s.stop+')'));
      if(s.reasoning){var why=fold(s.reasoning,0); why.classList.add('reasoning'); r.appendChild(el('i',null,'reasoning')); r.appendChild(why);}
      if(s.text)r.appendChild(fold(s.text,600)); if(s.calls.length)r.appendChild(calls(s.calls)); d.appendChild(r);}
    s.results.forEach(function(x){var box=el('div','msg tool'+(x[1]?' error':'')); box.appendChild(el('b',null,x[1]?'tool result (error)':'tool result')); box.appendChild(fold(x[0],600)); d.appendChild(box);});
    return d;
  }
  function render(key,box,then){
    if(box.dataset.drawn){if(then)then(); return;}
    withTask(key,function(){
      if(box.dataset.drawn)return; box.dataset.drawn='1';
      var t=data[key];
      box.appendChild(el('p',null,t.meta)); box.appendChild(el('h4',null,'phases')); box.appendChild(phases(t.phases));
      box.appendChild(el('h4',null,'trajectory ('+t.steps.length+' steps)'));
      if(t.atif){var a=el('a',null,'ATIF v1.8'); a.href=t.atif; var p=el('p',null,'export: '); p.appendChild(a); box.appendChild(p);}
      (t.problems||[]).forEach(function(p){box.appendChild(el('p','warn','not read: '+p));});
      t.steps.forEach(function(s,i){box.appendChild(step(s,i));});
      box.appendChild(el('h4',null,'patch')); box.appendChild(t.patch?patch(t.patch):el('p',null,'(empty)'));
      box.appendChild(el('h4',null,'tests')); box.appendChild(tests(t.tests));
      var out=el('details','output'); out.appendChild(el('summary',null,'test output'));
      out.appendChild(el('pre',null,t.output||'(tests not run)')); box.appendChild(out);
      if(then)then();
    });
  }
  function draw(details,then){render(details.dataset.key,details.querySelector('.detail'),then);}
  // The table: rows [key, instance, cell, sample, verdict, class, steps, seconds], drawn PAGE at a time
  // (thousands of rows drawn up front were most of the page's first screen); the filter runs over all.
  var rows=JSON.parse(document.getElementById('task-rows').textContent), PAGE=500;
  var body=document.getElementById('task-body'), input=document.getElementById('filter'), more=document.getElementById('more');
  var search=rows.map(function(r){return (r[1]+' '+r[2]+' '+r[4]).toLowerCase();}), at={}, made={}, matches=[], drawn=0;
  rows.forEach(function(r,i){at[r[0]]=i;});
  function label(r){return r[2]+' · '+r[1]+' #'+r[3]+' · '+r[4];}
  function row(i){  // made once: a row filtered out and back keeps its opened detail
    var r=rows[i]; if(made[i])return made[i];
    var tr=el('tr','task'), td=el('td'), d=el('details','task'); tr.dataset.key=r[0]; tr.dataset.label=label(r); d.dataset.key=r[0];
    d.appendChild(el('summary',null,r[1])); d.appendChild(el('div','detail')); td.appendChild(d); tr.appendChild(td);
    d.addEventListener('toggle',function(){if(d.open)draw(d);});
    tr.appendChild(el('td',null,r[2])); tr.appendChild(el('td','num',String(r[3]))); tr.appendChild(el('td',r[5],r[4]));
    tr.appendChild(el('td','num',String(r[6]))); tr.appendChild(el('td','num',r[7]));
    return made[i]=tr;
  }
  function drawTo(n){
    var part=document.createDocumentFragment();
    for(;drawn<Math.min(n,matches.length);drawn++)part.appendChild(row(matches[drawn]));
    body.appendChild(part);
    var left=matches.length-drawn; more.parentNode.style.display=left?'':'none';
    more.textContent='show '+Math.min(left,PAGE)+' more ('+drawn+' of '+matches.length+' shown)';
  }
  function apply(){
    var q=input.value.toLowerCase(); matches=[];
    for(var i=0;i<rows.length;i++)if(search[i].indexOf(q)>=0)matches.push(i);
    body.textContent=''; drawn=0; drawTo(PAGE);
    document.getElementById('shown').textContent=matches.length;
  }
  input.addEventListener('input',apply); more.addEventListener('click',function(){drawTo(drawn+PAGE);}); apply();
  // A task's row, drawn if it is not yet (the filter cleared if it hides the task); null: no such task.
  function taskRow(key){
    var i=at[key]; if(i==null)return null;
    var n=matches.indexOf(i); if(n<0){input.value=''; apply(); n=matches.indexOf(i);}
    drawTo(n+1); return row(i);
  }
  // #pair=KEY_A,KEY_B: a flipped pair's two tasks side by side, above the flips table.
  function pair(keys){
    var panel=document.getElementById('pair'); if(!panel)return;
    panel.textContent=''; panel.style.display='';
    keys.forEach(function(key){
      var i=at[key], side=el('div','side');
      side.appendChild(el('h3',null,i!=null?label(rows[i]):key)); var box=el('div','detail'); side.appendChild(box);
      panel.appendChild(side); render(key,box);
    });
    panel.scrollIntoView();
  }
  function follow(){
    var h=new URLSearchParams(location.hash.slice(1));
    if(h.get('pair')){pair(h.get('pair').split(',')); return;}
    var key=h.get('task'); if(!key)return;
    var tr=taskRow(key); if(!tr)return;
    var d=tr.querySelector('details.task');
    d.open=true;
    draw(d,function(){
      var n=h.get('step'), s=n!=null?d.querySelector('details.step[data-step="'+CSS.escape(n)+'"]'):null;
      if(s){s.open=true; s.scrollIntoView();} else d.scrollIntoView();
    });
  }
  window.addEventListener('hashchange',follow); follow();
  document.body.dataset.ready='1';
})();
